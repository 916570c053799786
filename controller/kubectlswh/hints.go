package kubectlswh

// reasonHints say, for each reason a probe fails with, what it means and
// where to look first: the probe's message says what it found, the hint
// what to do about it. Reasons the agent marks endpoints with (pending,
// exclusive-standby, …) explain themselves in the message.
var reasonHints = map[string]string{
	// Any probe.
	"refused":        "nothing listens on the port: the process is down or listens on another port or address",
	"timeout":        "no answer within timeoutSeconds: the server is overloaded or hung, or a NetworkPolicy or firewall drops the agent's packets",
	"reset":          "the server closed or reset the connection mid-probe: it crashed, restarts, or refuses this kind of client",
	"unreachable":    "no route to the pod: the node's pod network is broken",
	"dns":            "a host name in the probe does not resolve",
	"tls":            "the TLS handshake or the certificate's verification failed: check the CA (caCert), the server name and the server's certificate",
	"protocol":       "the server does not speak the probe's protocol on this port, or answered beyond the probe's bounds: check targetPort and mode",
	"invalid-target": "the pod's address or port cannot be probed",
	"canceled":       "the probe was canceled before it finished: the agent was stopping or the target went away",
	"error":          "a failure the probe could not classify: the message says what",
	"config":         "the probe's configuration cannot work (a CA bundle that does not parse, a pattern the library refuses): fix the spec",
	"secret":         "the credentials Secret is missing, unreadable, too large or lacks a key: check authSecretName and the agent's access to it",
	"no-port":        "the probe's named targetPort names no container port of the pod",
	// HTTP and TCP scripts.
	"http-status":     "the HTTP status is not one of expectedStatusCodes",
	"body-mismatch":   "the response body's first withinBytes do not match expectBody",
	"expect-mismatch": "the server's answer to a step of the TCP script does not match its expect (a mail server greeting with 421 or 554, say)",
	// gRPC.
	"grpc-not-serving":     "the gRPC health service answers NOT_SERVING (or UNKNOWN) for the service name",
	"grpc-service-unknown": "the gRPC health service does not know the service name: check grpc.service (empty asks about the whole server)",
	"grpc-unimplemented":   "the server has no grpc.health.v1.Health service: register it, or probe with TCP",
	"grpc-status":          "the health call ended with a gRPC error status (the message names it)",
	// Databases.
	"auth":                 "the server refused the credentials, or the probe refused to send a password in clear text to an unverified server (see insecureAllowCleartextPassword)",
	"db-missing":           "the database named in dbName does not exist",
	"too-many-connections": "the server has no connection left for the probe",
	"unavailable":          "the server is starting, shutting down, loading its data set or in recovery",
	"query-error":          "the probe's query failed on the server",
	"query-false":          "the probe's query returned false (0, NULL): for a writer query, this pod is not the primary",
	"replication-lag":      "the replica is further behind its primary than maxReplicationLag allows",
	"wrong-role":           "the Redis server does not have the role the probe asks for: after a failover, the master is another pod",
	"replica-link-down":    "the Redis replica is not connected to its master, or is still in a full sync",
}

// ReasonHint returns what a probe reason means, "" for a reason without
// a hint.
func ReasonHint(reason string) string { return reasonHints[reason] }
