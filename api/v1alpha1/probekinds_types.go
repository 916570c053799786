package v1alpha1

import (
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ProbeTLS is the TLS of a TCP or gRPC probe. The server is verified
// against caCert, or the system roots without it, unless
// insecureSkipTLSVerify is set.
//
// +kubebuilder:validation:XValidation:rule="!has(self.caCert) || !(has(self.insecureSkipTLSVerify) && self.insecureSkipTLSVerify)",message="caCert and insecureSkipTLSVerify are mutually exclusive",fieldPath=.caCert
type ProbeTLS struct {
	// ServerName is sent as SNI and verified in the server's
	// certificate; it defaults to the pod's address (verified against the
	// certificate's IP addresses, no SNI).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?$`
	ServerName string `json:"serverName,omitempty"`

	// CACert is a PEM bundle of the certificate authorities that verify the
	// server. Without it, the system roots are used.
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	// +kubebuilder:validation:XValidation:rule="self.contains('-----BEGIN CERTIFICATE-----')",message="caCert must be a PEM bundle of certificates"
	CACert string `json:"caCert,omitempty"`

	// InsecureSkipTLSVerify accepts any server certificate.
	// +optional
	InsecureSkipTLSVerify bool `json:"insecureSkipTLSVerify,omitempty"`
}

// TCPStep is one exchange of a TCP probe: send (or sendBytes), if set, is
// written; then expect, if set, must match what the server sends.
//
// +kubebuilder:validation:XValidation:rule="has(self.send) || has(self.sendBytes) || has(self.expect)",message="a step needs send, sendBytes or expect"
// +kubebuilder:validation:XValidation:rule="!(has(self.send) && has(self.sendBytes))",message="set send or sendBytes, not both",fieldPath=.sendBytes
type TCPStep struct {
	// Send is written as it is (UTF-8): write line ends in a double-quoted
	// YAML string, "EHLO swh\r\n".
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="bytes(self).size() <= 4096",message="send must be at most 4096 bytes (UTF-8)"
	Send string `json:"send,omitempty"`

	// SendBytes is written as it is (base64 in YAML and JSON), at most
	// 4096 bytes.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=5464
	SendBytes []byte `json:"sendBytes,omitempty"`

	// Expect must match what arrives.
	// +optional
	Expect *ProbeExpect `json:"expect,omitempty"`
}

// ProbeExpect is what received bytes must contain: exactly one of text,
// bytes and regexp.
//
// +kubebuilder:validation:XValidation:rule="[has(self.text), has(self.bytes), has(self.regexp)].filter(x, x).size() == 1",message="set exactly one of text, bytes and regexp"
type ProbeExpect struct {
	// Text matches when what arrived contains it.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="bytes(self).size() <= 1024",message="text must be at most 1024 bytes (UTF-8)"
	Text string `json:"text,omitempty"`

	// Bytes matches when what arrived contains them (base64 in YAML and
	// JSON), at most 1024 bytes.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1368
	Bytes []byte `json:"bytes,omitempty"`

	// Regexp is an RE2 regular expression matched anywhere in what
	// arrived: anchor it with ^ to match from the start, write (?m) for ^
	// and $ to match at line ends, (?s) for . to match them.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="''.matches(self) || !''.matches(self)",message="regexp must be an RE2 regular expression"
	// +kubebuilder:validation:XValidation:rule="bytes(self).size() <= 1024",message="regexp must be at most 1024 bytes (UTF-8)"
	Regexp string `json:"regexp,omitempty"`
}

// HTTPExpectBody is what the start of an HTTP response body must contain:
// exactly one of text and regexp.
//
// +kubebuilder:validation:XValidation:rule="has(self.text) != has(self.regexp)",message="set exactly one of text and regexp"
type HTTPExpectBody struct {
	// Text matches when the body's first withinBytes contain it.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="bytes(self).size() <= 1024",message="text must be at most 1024 bytes (UTF-8)"
	Text string `json:"text,omitempty"`

	// Regexp is an RE2 regular expression matched anywhere in the body's
	// first withinBytes.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="''.matches(self) || !''.matches(self)",message="regexp must be an RE2 regular expression"
	// +kubebuilder:validation:XValidation:rule="bytes(self).size() <= 1024",message="regexp must be at most 1024 bytes (UTF-8)"
	Regexp string `json:"regexp,omitempty"`

	// WithinBytes is how much of the body is read and searched.
	// +optional
	// +kubebuilder:default=1024
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65536
	WithinBytes int32 `json:"withinBytes,omitempty"`
}

// GRPCProbe calls grpc.health.v1.Health/Check on a fresh HTTP/2 connection
// and passes when the answer is SERVING.
type GRPCProbe struct {
	// TargetPort is the pod port to connect to: a number or a container port name.
	// +required
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? (self >= 1 && self <= 65535) : (self.size() <= 15 && self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && self.matches('[a-z]') && !self.contains('--'))",message="targetPort must be a number from 1 to 65535 or an IANA service name (at most 15 lowercase letters, digits and single '-', with a letter)"
	TargetPort intstr.IntOrString `json:"targetPort"`

	// Service is the service name asked about; empty asks about the
	// server as a whole.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="bytes(self).size() <= 1024",message="service must be at most 1024 bytes (UTF-8)"
	Service string `json:"service,omitempty"`

	// TLS, when set, speaks HTTP/2 over TLS; unset, HTTP/2 in clear text
	// (h2c), as kubelet's gRPC probe.
	// +optional
	TLS *ProbeTLS `json:"tls,omitempty"`

	// Metadata are sent with the call, as request headers.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Metadata []GRPCMetadata `json:"metadata,omitempty"`
}

// GRPCMetadata is one entry of a call's metadata.
//
// +kubebuilder:validation:XValidation:rule="!self.name.startsWith('grpc-') && !(self.name in ['content-type', 'te', 'user-agent', 'host', 'connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'content-length', 'trailer', 'accept-encoding', 'content-encoding'])",message="name is reserved: the prober sets the grpc- entries, content-type, te, user-agent, the connection headers and the body's encoding",fieldPath=.name
type GRPCMetadata struct {
	// Name is the key: lowercase letters, digits, '-', '_' and '.'; a
	// binary key (ending in -bin) is not supported.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[0-9a-z_.-]+$`
	// +kubebuilder:validation:XValidation:rule="!self.endsWith('-bin')",message="binary metadata (a name ending in -bin) is not supported"
	Name string `json:"name"`

	// Value is printable ASCII.
	// +required
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:Pattern=`^[ -~]*$`
	Value string `json:"value"`
}

// DatabaseTLSMode is the TLS mode of a Redis or MySQL probe, with
// PostgreSQL's sslmode names.
// +kubebuilder:validation:Enum=disable;require;verify-ca;verify-full
type DatabaseTLSMode string

// The database TLS modes: disable, no TLS; require, TLS with any server
// certificate; verify-ca, a certificate from the Secret's caCert;
// verify-full, that and the pod's address (or name) in it.
const (
	DatabaseTLSDisable    DatabaseTLSMode = "disable"
	DatabaseTLSRequire    DatabaseTLSMode = "require"
	DatabaseTLSVerifyCA   DatabaseTLSMode = "verify-ca"
	DatabaseTLSVerifyFull DatabaseTLSMode = "verify-full"
)

// RedisRole is the role a Redis probe asks for.
// +kubebuilder:validation:Enum=Any;Master;Replica
type RedisRole string

// The Redis roles: Any passes on any server that answers PING; Master on
// a master only; Replica on a replica connected to its master, not in a
// full sync.
const (
	RedisRoleAny     RedisRole = "Any"
	RedisRoleMaster  RedisRole = "Master"
	RedisRoleReplica RedisRole = "Replica"
)

// RedisProbe logs in (when a Secret gives a password) and passes when the
// server answers and has the role asked for: a Service of role Master
// follows the master through a failover.
//
// +kubebuilder:validation:XValidation:rule="!has(self.tlsMode) || !(self.tlsMode in ['verify-ca', 'verify-full']) || (has(self.authSecretName) && self.authSecretName.size() > 0)",message="tlsMode verify-ca and verify-full need authSecretName: the CA certificate is read from that Secret's caCert key",fieldPath=.authSecretName
// +kubebuilder:validation:XValidation:rule="!has(self.maxReplicationLag) || !has(self.role) || self.role != 'Master'",message="maxReplicationLag judges replicas: it cannot be set with role Master",fieldPath=.maxReplicationLag
type RedisProbe struct {
	// TargetPort is the pod port to connect to: a number or a container port name.
	// +required
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? (self >= 1 && self <= 65535) : (self.size() <= 15 && self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && self.matches('[a-z]') && !self.contains('--'))",message="targetPort must be a number from 1 to 65535 or an IANA service name (at most 15 lowercase letters, digits and single '-', with a letter)"
	TargetPort intstr.IntOrString `json:"targetPort"`

	// AuthSecretName names a Secret of any type in the resource's namespace
	// with the keys password (without it the probe does not log in), user
	// (an ACL user; without it AUTH sends the password alone), tlsMode,
	// caCert, clientCert and clientKey (PEM), each optional. Without the
	// Secret the probe does not log in.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	AuthSecretName string `json:"authSecretName,omitempty"`

	// TLSMode is disable, require, verify-ca or verify-full. Unset, the
	// tlsMode key of the Secret applies, else disable.
	// +optional
	TLSMode DatabaseTLSMode `json:"tlsMode,omitempty"`

	// InsecureAllowCleartextPassword sends the password over a connection
	// whose server is not verified (tlsMode disable or require): Redis's
	// AUTH always carries it in clear inside the connection, so whoever
	// answers on the pod's address receives it. Off (the default), such a
	// probe fails with reason auth before the password leaves the agent.
	// +optional
	InsecureAllowCleartextPassword bool `json:"insecureAllowCleartextPassword,omitempty"`

	// Role is Any (the default: PING answers PONG), Master or Replica (a
	// replica whose link to its master is up and not in a full sync).
	// +optional
	// +kubebuilder:default=Any
	Role RedisRole `json:"role,omitempty"`

	// MaxReplicationLag fails the probe on a replica further behind its
	// master than it allows, with reason replication-lag; a master is
	// never judged.
	// +optional
	MaxReplicationLag *RedisReplicationLag `json:"maxReplicationLag,omitempty"`
}

// RedisReplicationLag bounds a Redis replica's lag.
//
// +kubebuilder:validation:XValidation:rule="has(self.bytes) || has(self.seconds)",message="maxReplicationLag needs bytes or seconds"
type RedisReplicationLag struct {
	// Bytes bounds the replication stream the replica has read from its
	// master and not applied yet (slave_read_repl_offset minus
	// slave_repl_offset).
	// +optional
	// +kubebuilder:validation:Minimum=1
	Bytes *int64 `json:"bytes,omitempty"`

	// Seconds bounds the time since the replica last heard from its master
	// (master_last_io_seconds_ago). A master pings its replicas every
	// repl-ping-replica-period (10 s by default): set more than that.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	Seconds *int32 `json:"seconds,omitempty"`
}

// MySQLProbe logs in to MySQL or MariaDB, runs Query and passes when it
// completes and its first column, if any, is not false (0, NULL).
// "SELECT @@read_only = 0" passes on the writer only.
//
// +kubebuilder:validation:XValidation:rule="!has(self.tlsMode) || !(self.tlsMode in ['verify-ca', 'verify-full']) || (has(self.authSecretName) && self.authSecretName.size() > 0)",message="tlsMode verify-ca and verify-full need authSecretName: the CA certificate is read from that Secret's caCert key",fieldPath=.authSecretName
type MySQLProbe struct {
	// TargetPort is the pod port to connect to: a number or a container port name.
	// +required
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? (self >= 1 && self <= 65535) : (self.size() <= 15 && self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && self.matches('[a-z]') && !self.contains('--'))",message="targetPort must be a number from 1 to 65535 or an IANA service name (at most 15 lowercase letters, digits and single '-', with a letter)"
	TargetPort intstr.IntOrString `json:"targetPort"`

	// DBName is the database to connect to; none by default.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	DBName string `json:"dbName,omitempty"`

	// Query is run once per probe.
	// +optional
	// +kubebuilder:default="SELECT 1"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Query string `json:"query,omitempty"`

	// AuthSecretName names a Secret of any type in the resource's namespace
	// with the keys user and password, and optionally tlsMode, caCert,
	// clientCert and clientKey (PEM). Without it the probe logs in as root
	// without a password.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	AuthSecretName string `json:"authSecretName,omitempty"`

	// TLSMode is disable, require, verify-ca or verify-full. Unset, the
	// tlsMode key of the Secret applies, else disable.
	// +optional
	TLSMode DatabaseTLSMode `json:"tlsMode,omitempty"`

	// InsecureAllowCleartextPassword lets the probe answer a server that
	// asks for the password in clear text (mysql_clear_password), or
	// encrypted with a key it supplies, over a connection whose server is
	// not verified. Off (the default), such a request fails the probe with
	// reason auth before the password leaves the agent.
	// mysql_native_password, client_ed25519 and caching_sha2_password's
	// fast path, which do not send it, always work; caching_sha2_password's
	// full authentication (an account the server has not cached since it
	// started) sends the password, so it works over a verified TLS
	// connection, or with this opt-in.
	// +optional
	InsecureAllowCleartextPassword bool `json:"insecureAllowCleartextPassword,omitempty"`
}
