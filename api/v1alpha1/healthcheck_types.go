package v1alpha1

import (
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Healthcheck is the set of active probes that decide which pods receive
// traffic on which port.
//
// +kubebuilder:validation:XValidation:rule="!has(self.probes) || self.probes.all(p, p.timeoutSeconds <= self.periodSeconds)",message="spec.healthcheck.probes[].timeoutSeconds must not exceed spec.healthcheck.periodSeconds",fieldPath=.probes
// +kubebuilder:validation:XValidation:rule="!has(self.fastPeriodSeconds) || self.fastPeriodSeconds <= self.periodSeconds",message="spec.healthcheck.fastPeriodSeconds must not exceed spec.healthcheck.periodSeconds",fieldPath=.fastPeriodSeconds
// +kubebuilder:validation:XValidation:rule="!has(self.downPeriodSeconds) || self.downPeriodSeconds >= self.periodSeconds",message="spec.healthcheck.downPeriodSeconds must not be below spec.healthcheck.periodSeconds",fieldPath=.downPeriodSeconds
type Healthcheck struct {
	// InitialDelaySeconds is how long after a pod starts its probes begin.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	InitialDelaySeconds int32 `json:"initialDelaySeconds"`

	// PeriodSeconds is how often each probe runs.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	PeriodSeconds int32 `json:"periodSeconds"`

	// FastPeriodSeconds is how often a probe runs while its verdict is
	// changing, as HAProxy's fastinter: from a passing target's first
	// failure until failureThreshold decides, and from a failing target's
	// first success until successThreshold does. A failure is then acted
	// on in about periodSeconds + (failureThreshold-1) × fastPeriodSeconds
	// instead of failureThreshold × periodSeconds; a target whose results
	// agree with its verdict is probed every periodSeconds, so the steady
	// probe rate is unchanged. Unset means periodSeconds. At most
	// periodSeconds.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	FastPeriodSeconds *int32 `json:"fastPeriodSeconds,omitempty"`

	// DownPeriodSeconds is how often a probe runs while a target that
	// passed before is down, as HAProxy's downinter: dead pods cost fewer
	// probes, and a recovery is seen up to this long after it happens.
	// A pod that never passed (a starting one) is probed every
	// periodSeconds. Unset means periodSeconds. At least periodSeconds.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	DownPeriodSeconds *int32 `json:"downPeriodSeconds,omitempty"`

	// FlapDamping keeps a target that keeps failing and recovering out
	// longer at each withdrawal, as Envoy's outlier ejection does: each
	// flap costs two slice writes and moves traffic twice. Unset, a
	// target is published again as soon as successThreshold passes.
	// +optional
	FlapDamping *FlapDamping `json:"flapDamping,omitempty"`

	// Probes are grouped by the port they check: a probe whose targetPort
	// equals the targetPort of one of spec.ports gates that port only; one
	// matching no port gates every port of the pod; several probes on one
	// port must all pass.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Probes []Probe `json:"probes,omitempty"`
}

// ProbeMode names the kind of a probe.
// +kubebuilder:validation:Enum=TCP;HTTP;PostgreSQL;GRPC;Redis;MySQL
type ProbeMode string

// The probe modes.
const (
	ProbeModeTCP        ProbeMode = "TCP"
	ProbeModeHTTP       ProbeMode = "HTTP"
	ProbeModePostgreSQL ProbeMode = "PostgreSQL"
	ProbeModeGRPC       ProbeMode = "GRPC"
	ProbeModeRedis      ProbeMode = "Redis"
	ProbeModeMySQL      ProbeMode = "MySQL"
)

// Probe is one active check. Exactly the sub-object named by Mode is set.
//
// +kubebuilder:validation:XValidation:rule="self.mode != 'TCP' || has(self.tcp)",message="tcp is required when mode is TCP",fieldPath=.tcp
// +kubebuilder:validation:XValidation:rule="!has(self.tcp) || self.mode == 'TCP'",message="tcp may only be set when mode is TCP",fieldPath=.tcp
// +kubebuilder:validation:XValidation:rule="self.mode != 'HTTP' || has(self.http)",message="http is required when mode is HTTP",fieldPath=.http
// +kubebuilder:validation:XValidation:rule="!has(self.http) || self.mode == 'HTTP'",message="http may only be set when mode is HTTP",fieldPath=.http
// +kubebuilder:validation:XValidation:rule="self.mode != 'PostgreSQL' || has(self.postgreSQL)",message="postgreSQL is required when mode is PostgreSQL",fieldPath=.postgreSQL
// +kubebuilder:validation:XValidation:rule="!has(self.postgreSQL) || self.mode == 'PostgreSQL'",message="postgreSQL may only be set when mode is PostgreSQL",fieldPath=.postgreSQL
// +kubebuilder:validation:XValidation:rule="self.mode != 'GRPC' || has(self.grpc)",message="grpc is required when mode is GRPC",fieldPath=.grpc
// +kubebuilder:validation:XValidation:rule="!has(self.grpc) || self.mode == 'GRPC'",message="grpc may only be set when mode is GRPC",fieldPath=.grpc
// +kubebuilder:validation:XValidation:rule="self.mode != 'Redis' || has(self.redis)",message="redis is required when mode is Redis",fieldPath=.redis
// +kubebuilder:validation:XValidation:rule="!has(self.redis) || self.mode == 'Redis'",message="redis may only be set when mode is Redis",fieldPath=.redis
// +kubebuilder:validation:XValidation:rule="self.mode != 'MySQL' || has(self.mySQL)",message="mySQL is required when mode is MySQL",fieldPath=.mySQL
// +kubebuilder:validation:XValidation:rule="!has(self.mySQL) || self.mode == 'MySQL'",message="mySQL may only be set when mode is MySQL",fieldPath=.mySQL
type Probe struct {
	// Mode is the kind of probe: TCP, HTTP, PostgreSQL, GRPC, Redis or
	// MySQL.
	// +required
	Mode ProbeMode `json:"mode"`

	// TimeoutSeconds bounds one probe, connection included.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	TimeoutSeconds int32 `json:"timeoutSeconds"`

	// SuccessThreshold is how many consecutive successes make a failing
	// target pass again.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	SuccessThreshold int32 `json:"successThreshold"`

	// FailureThreshold is how many consecutive failures make a passing
	// target fail.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	FailureThreshold int32 `json:"failureThreshold"`

	// TCP connects to the port and closes the connection, sending nothing,
	// or holds the conversation of its steps.
	// +optional
	TCP *TCPProbe `json:"tcp,omitempty"`

	// HTTP sends a request and checks the response status (and body).
	// +optional
	HTTP *HTTPProbe `json:"http,omitempty"`

	// PostgreSQL logs in, runs a query and checks its first column.
	// +optional
	PostgreSQL *PostgreSQLProbe `json:"postgreSQL,omitempty"`

	// GRPC calls grpc.health.v1.Health/Check and passes on SERVING.
	// +optional
	GRPC *GRPCProbe `json:"grpc,omitempty"`

	// Redis logs in, checks the server answers and, optionally, its role.
	// +optional
	Redis *RedisProbe `json:"redis,omitempty"`

	// MySQL logs in to MySQL or MariaDB, runs a query and checks its first
	// column.
	// +optional
	MySQL *MySQLProbe `json:"mySQL,omitempty"`
}

// TCPProbe checks that a port accepts connections and, with steps, that
// the server answers as expected.
type TCPProbe struct {
	// TargetPort is the pod port to connect to: a number or a container port name.
	// +required
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? (self >= 1 && self <= 65535) : (self.size() <= 15 && self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && self.matches('[a-z]') && !self.contains('--'))",message="targetPort must be a number from 1 to 65535 or an IANA service name (at most 15 lowercase letters, digits and single '-', with a letter)"
	TargetPort intstr.IntOrString `json:"targetPort"`

	// TLS, when set, completes a TLS handshake right after connecting (TLS
	// first, not STARTTLS); the steps then run inside it.
	// +optional
	TLS *ProbeTLS `json:"tls,omitempty"`

	// Steps make the probe a short conversation, in order: each sends its
	// send (or sendBytes), then reads until its expect matches what
	// arrived since the previous match, within 16 KiB.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Steps []TCPStep `json:"steps,omitempty"`
}

// HTTPScheme is the scheme of an HTTP probe.
// +kubebuilder:validation:Enum=HTTP;HTTPS
type HTTPScheme string

// The HTTP probe schemes.
const (
	HTTPSchemeHTTP  HTTPScheme = "HTTP"
	HTTPSchemeHTTPS HTTPScheme = "HTTPS"
)

// HTTPProbe sends one request per probe, without keep-alive, and passes when
// the response status is one of ExpectedStatusCodes. Redirects are not
// followed.
//
// +kubebuilder:validation:XValidation:rule="!(has(self.insecureSkipTLSVerify) && self.insecureSkipTLSVerify) || self.scheme == 'HTTPS'",message="insecureSkipTLSVerify may only be set when scheme is HTTPS",fieldPath=.insecureSkipTLSVerify
// +kubebuilder:validation:XValidation:rule="!has(self.caCert) || self.scheme == 'HTTPS'",message="caCert may only be set when scheme is HTTPS",fieldPath=.caCert
// +kubebuilder:validation:XValidation:rule="!has(self.caCert) || !(has(self.insecureSkipTLSVerify) && self.insecureSkipTLSVerify)",message="caCert and insecureSkipTLSVerify are mutually exclusive",fieldPath=.caCert
// +kubebuilder:validation:XValidation:rule="!has(self.host) || !has(self.httpHeaders) || !self.httpHeaders.exists(h, h.name.lowerAscii() == 'host')",message="set the Host header either with host or in httpHeaders, not both",fieldPath=.httpHeaders
// +kubebuilder:validation:XValidation:rule="!has(self.expectBody) || !has(self.method) || self.method == 'GET'",message="expectBody needs method GET: a HEAD response has no body",fieldPath=.expectBody
type HTTPProbe struct {
	// TargetPort is the pod port to connect to: a number or a container port name.
	// +required
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? (self >= 1 && self <= 65535) : (self.size() <= 15 && self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && self.matches('[a-z]') && !self.contains('--'))",message="targetPort must be a number from 1 to 65535 or an IANA service name (at most 15 lowercase letters, digits and single '-', with a letter)"
	TargetPort intstr.IntOrString `json:"targetPort"`

	// Path of the request, starting with "/"; it may carry a query.
	// +optional
	// +kubebuilder:default="/"
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.startsWith('/') && !self.startsWith('//')",message="path must start with a single '/'"
	// +kubebuilder:validation:XValidation:rule="!self.matches('[\\\\s#]')",message="path must not contain white space or a fragment ('#')"
	Path string `json:"path,omitempty"`

	// Host is sent as the Host header and, with HTTPS, as the TLS server
	// name. It defaults to the pod's address.
	// +optional
	// +kubebuilder:validation:MaxLength=261
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?(:[0-9]{1,5})?$|^\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?$`
	Host string `json:"host,omitempty"`

	// HTTPHeaders are extra request headers.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	HTTPHeaders []HTTPHeader `json:"httpHeaders,omitempty"`

	// Method is GET or HEAD.
	// +optional
	// +kubebuilder:default=GET
	// +kubebuilder:validation:Enum=GET;HEAD
	Method string `json:"method,omitempty"`

	// Scheme is HTTP or HTTPS.
	// +optional
	// +kubebuilder:default=HTTP
	Scheme HTTPScheme `json:"scheme,omitempty"`

	// InsecureSkipTLSVerify accepts any server certificate (HTTPS only).
	// +optional
	InsecureSkipTLSVerify bool `json:"insecureSkipTLSVerify,omitempty"`

	// CACert is a PEM bundle of the certificate authorities that verify the
	// server (HTTPS only). Without it, the system roots are used.
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	// +kubebuilder:validation:XValidation:rule="self.contains('-----BEGIN CERTIFICATE-----')",message="caCert must be a PEM bundle of certificates"
	CACert string `json:"caCert,omitempty"`

	// ExpectedStatusCodes are the response codes that pass: codes ("204")
	// and inclusive ranges ("200-399").
	// +optional
	// +listType=atomic
	// +kubebuilder:default={"200-399"}
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=7
	// +kubebuilder:validation:items:Pattern=`^[1-5][0-9][0-9](-[1-5][0-9][0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self.all(c, c.size() == 3 || int(c.substring(0, 3)) <= int(c.substring(4, 7)))",message="expectedStatusCodes ranges must be written low-high"
	ExpectedStatusCodes []string `json:"expectedStatusCodes,omitempty"`

	// ExpectBody, when set, must match within the first bytes of the body
	// of a response whose status is expected (GET only).
	// +optional
	ExpectBody *HTTPExpectBody `json:"expectBody,omitempty"`
}

// HTTPHeader is one request header. The prober owns the framing headers: it
// opens one connection per probe and sends no body.
// +kubebuilder:validation:XValidation:rule="!(self.name.lowerAscii() in ['connection', 'content-length', 'transfer-encoding'])",message="Connection, Content-Length and Transfer-Encoding are set by the prober",fieldPath=.name
type HTTPHeader struct {
	// Name is the header field name (an RFC 9110 token).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[-!#$%&'*+.^_|~0-9A-Za-z]+$`
	Name string `json:"name"`
	// Value is the header field value.
	// +required
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="!self.matches('[\\\\r\\\\n\\\\x00]')",message="header value must not contain CR, LF or NUL"
	Value string `json:"value"`
}

// PostgreSQLTLSMode is the sslmode of a PostgreSQL probe.
// +kubebuilder:validation:Enum=disable;require;verify-ca;verify-full
type PostgreSQLTLSMode string

// The PostgreSQL TLS modes, as libpq's sslmode.
const (
	PostgreSQLTLSDisable    PostgreSQLTLSMode = "disable"
	PostgreSQLTLSRequire    PostgreSQLTLSMode = "require"
	PostgreSQLTLSVerifyCA   PostgreSQLTLSMode = "verify-ca"
	PostgreSQLTLSVerifyFull PostgreSQLTLSMode = "verify-full"
)

// PostgreSQLProbe logs in, runs Query and passes when it completes and its
// first column, if any, is not false. "SELECT NOT pg_is_in_recovery()" passes
// on the primary only.
//
// +kubebuilder:validation:XValidation:rule="!has(self.tlsMode) || !(self.tlsMode in ['verify-ca', 'verify-full']) || (has(self.authSecretName) && self.authSecretName.size() > 0)",message="tlsMode verify-ca and verify-full need authSecretName: the CA certificate is read from that Secret's caCert key",fieldPath=.authSecretName
type PostgreSQLProbe struct {
	// TargetPort is the pod port to connect to: a number or a container port name.
	// +required
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? (self >= 1 && self <= 65535) : (self.size() <= 15 && self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && self.matches('[a-z]') && !self.contains('--'))",message="targetPort must be a number from 1 to 65535 or an IANA service name (at most 15 lowercase letters, digits and single '-', with a letter)"
	TargetPort intstr.IntOrString `json:"targetPort"`

	// DBName is the database to connect to.
	// +optional
	// +kubebuilder:default=postgres
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	DBName string `json:"dbName,omitempty"`

	// Query is run once per probe.
	// +optional
	// +kubebuilder:default="SELECT 1"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Query string `json:"query,omitempty"`

	// AuthSecretName names a Secret of any type in the resource's namespace
	// with the keys user and password, and optionally tlsMode, caCert,
	// clientCert and clientKey (PEM).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	AuthSecretName string `json:"authSecretName,omitempty"`

	// TLSMode is the sslmode: disable, require, verify-ca or verify-full.
	// Unset, the tlsMode key of the Secret applies, else disable; set, it
	// wins over the Secret's (the agent reports the conflict).
	// +optional
	TLSMode PostgreSQLTLSMode `json:"tlsMode,omitempty"`

	// InsecureAllowCleartextPassword sends the password when the server
	// asks for it in clear text (password authentication) over a connection
	// whose server is not verified: tlsMode disable, or require without a
	// caCert. Whoever answers on the pod's address then receives the
	// password. Off (the default), such a request fails the probe with
	// reason auth before the password leaves the agent; MD5 and
	// SCRAM-SHA-256, which never send the password itself, and cleartext
	// over a verified server (verify-ca, verify-full) always work.
	// +optional
	InsecureAllowCleartextPassword bool `json:"insecureAllowCleartextPassword,omitempty"`

	// MaxReplicationLag fails the probe on a streaming replica (a server
	// in recovery) that is further behind its primary than it allows,
	// with reason replication-lag; a primary is never judged. The lag is
	// read after the query passed, with functions any role may call.
	// +optional
	MaxReplicationLag *PostgreSQLReplicationLag `json:"maxReplicationLag,omitempty"`

	// CloseSessions ends the clients' sessions on a pod when the agent
	// withdraws it from a port this probe gates, since kube-proxy leaves
	// established connections open: OnExclusiveWithdrawal, only from an
	// exclusive port (spec.exclusive); OnWithdrawal, from any; Never
	// (the default) leaves them. The agent logs in with this probe's
	// credentials and ends every session but its own, the probes',
	// superusers' and replication roles' (pg_terminate_backend), at once
	// and again over the next 30 s while the pod stays withdrawn (clients
	// that reconnect through a kube-proxy not yet updated). The role
	// needs pg_signal_backend:
	// GRANT pg_signal_backend TO <role>. Every session of the server ends,
	// whichever Service it came through.
	// +optional
	// +kubebuilder:validation:Enum=Never;OnExclusiveWithdrawal;OnWithdrawal
	CloseSessions PostgreSQLCloseSessions `json:"closeSessions,omitempty"`
}

// PostgreSQLReplicationLag bounds a replica's lag.
//
// +kubebuilder:validation:XValidation:rule="has(self.bytes) || has(self.seconds)",message="maxReplicationLag needs bytes or seconds"
type PostgreSQLReplicationLag struct {
	// Bytes bounds the WAL the replica has received and not replayed yet.
	// +optional
	// +kubebuilder:validation:Minimum=1
	Bytes *int64 `json:"bytes,omitempty"`

	// Seconds bounds how long the replica has had WAL waiting to be
	// replayed: the time since the agent first saw received the oldest
	// WAL not replayed yet, from the WAL positions it reads probe after
	// probe (up to one period short). A replica of an idle primary, with
	// nothing waiting, never lags, however old its last transaction; nor
	// does one replaying a long transaction as fast as it arrives.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	Seconds *int32 `json:"seconds,omitempty"`

	// KeepAtLeast is a floor for the ports this probe gates: while fewer
	// pods than this pass such a port across the cluster, the pods that
	// fail it only for their lag stay published (with reason
	// replication-lag-kept), so that when every replica lags together
	// reads are served stale rather than not at all. All such pods are
	// kept, not only the least lagged; a pod that starts to lag is kept
	// up to one period before it may leave. Unset, lagging replicas always
	// leave.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	KeepAtLeast *int32 `json:"keepAtLeast,omitempty"`
}

// PostgreSQLCloseSessions says when a PostgreSQL probe's agent ends the
// clients' sessions on a pod it withdraws.
type PostgreSQLCloseSessions string

// The values of closeSessions.
const (
	CloseSessionsNever                 PostgreSQLCloseSessions = "Never"
	CloseSessionsOnExclusiveWithdrawal PostgreSQLCloseSessions = "OnExclusiveWithdrawal"
	CloseSessionsOnWithdrawal          PostgreSQLCloseSessions = "OnWithdrawal"
)

// ClosesSessions reports whether the probe ends the sessions on a pod
// withdrawn from a port, exclusive or not.
func (p *PostgreSQLProbe) ClosesSessions(exclusive bool) bool {
	return p != nil && (p.CloseSessions == CloseSessionsOnWithdrawal || p.CloseSessions == CloseSessionsOnExclusiveWithdrawal && exclusive)
}

// FlapDamping bounds what a flapping target costs: once withdrawn for
// the n-th time in a row, a target stays out at least n ×
// baseEjectionSeconds, at most maxEjectionSeconds, however soon it passes
// again; after stableSeconds passing, n starts over.
//
// +kubebuilder:validation:XValidation:rule="self.maxEjectionSeconds >= self.baseEjectionSeconds",message="spec.healthcheck.flapDamping.maxEjectionSeconds must not be below baseEjectionSeconds",fieldPath=.maxEjectionSeconds
type FlapDamping struct {
	// BaseEjectionSeconds is the least time out of the first withdrawal
	// of a run of flaps, and is added at each of the next ones (Envoy's
	// base_ejection_time).
	// +optional
	// +kubebuilder:default=30
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	BaseEjectionSeconds int32 `json:"baseEjectionSeconds,omitempty"`

	// MaxEjectionSeconds caps the time out (Envoy's max_ejection_time):
	// a target that flaps forever costs two slice writes per
	// maxEjectionSeconds and its period.
	// +optional
	// +kubebuilder:default=600
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	MaxEjectionSeconds int32 `json:"maxEjectionSeconds,omitempty"`

	// StableSeconds is how long a target must pass without a withdrawal
	// for its run of flaps to end: its next withdrawal counts as the
	// first again.
	// +optional
	// +kubebuilder:default=600
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	StableSeconds int32 `json:"stableSeconds,omitempty"`
}
