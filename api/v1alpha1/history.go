package v1alpha1

import "time"

// TargetHistory is what an agent remembers of one probe of one pod of a
// resource: whether it is published passing, and its last transitions.
// An agent serves it (kubectl swh history reads it through the API
// server's pod proxy); nothing stores it.
// +kubebuilder:object:generate=false
type TargetHistory struct {
	Pod   string `json:"pod"`
	Probe int32  `json:"probe"`
	// Passing is the published verdict (a held target is passing).
	Passing bool `json:"passing"`
	// Ejections counts the withdrawals of the current run of flaps, with
	// spec.healthcheck.flapDamping.
	Ejections int `json:"ejections,omitempty"`
	// Transitions are the last ones, oldest first.
	Transitions []TargetTransition `json:"transitions,omitempty"`
}

// TargetTransition is one change of what is published for a target.
// +kubebuilder:object:generate=false
type TargetTransition struct {
	At    time.Time `json:"at"`
	Event string    `json:"event"`
	// Reason is that of the result that made it. (No message: the
	// history is served to whoever reaches the agent's metrics port,
	// and a message may quote a server's answer.)
	Reason string `json:"reason,omitempty"`
	// Ejections and OutUntil are the flap damping's: the withdrawals of
	// the run so far, and when the target may be published again.
	Ejections int        `json:"ejections,omitempty"`
	OutUntil  *time.Time `json:"outUntil,omitempty"`
}

// The events of a TargetTransition.
const (
	// TransitionWithdrawn: the probe's verdict withdrew the pod.
	TransitionWithdrawn = "withdrawn"
	// TransitionPublished: the probe passes again and publishes it.
	TransitionPublished = "published"
	// TransitionKept: the probe fails, and a fail-static hold keeps the
	// pod published.
	TransitionKept = "kept"
	// TransitionReleased: the hold ended for this target.
	TransitionReleased = "released"
	// TransitionDamped: the probe passes again, and flap damping keeps
	// the pod out until OutUntil.
	TransitionDamped = "damped"
)
