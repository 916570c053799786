package crd_test

import "strings"

// invalidCase is a spec the API server must reject; field is the path the
// message must name, message an optional part of the explanation.
type invalidCase struct {
	name       string
	objectName string
	spec       string
	field      string
	message    string
}

const (
	okPorts    = "ports: [{port: 80, targetPort: 8080}]\nselector: {app: x}\n"
	probeOpen  = okPorts + "healthcheck:\n  probes:\n  - "
	httpProbe  = probeOpen + "mode: HTTP\n    http:\n      targetPort: 8080\n"
	tcpProbeOK = probeOpen + "mode: TCP\n    tcp: {targetPort: 8080}\n"
)

var invalidCases = []invalidCase{
	// The Service part.
	{name: "ExternalName type", spec: "type: ExternalName\n" + okPorts, field: "spec.type", message: "ExternalName"},
	// As an ExternalName Service is written: no selector, no ports. The
	// missing required fields must not hide why the type is refused.
	{name: "ExternalName manifest", spec: "type: ExternalName\nexternalName: db.example.com\n", field: "spec.type", message: "ExternalName"},
	{name: "externalName set", spec: "externalName: db.example.com\n" + okPorts, field: "spec.externalName"},
	{name: "no selector", spec: "ports: [{port: 80}]\n", field: "spec.selector"},
	{name: "empty selector", spec: "ports: [{port: 80}]\nselector: {}\n", field: "spec.selector"},
	{name: "no ports", spec: "selector: {app: x}\n", field: "spec.ports"},
	{name: "port zero", spec: "ports: [{port: 0}]\nselector: {app: x}\n", field: "spec.ports[0].port"},
	{name: "port above 65535", spec: "ports: [{port: 70000}]\nselector: {app: x}\n", field: "spec.ports[0].port"},
	{name: "two ports without names", spec: "ports: [{port: 80}, {port: 443}]\nselector: {app: x}\n", field: "spec.ports", message: "name is required"},
	{name: "duplicate port names", spec: "ports: [{name: web, port: 80}, {name: web, port: 443}]\nselector: {app: x}\n", field: "spec.ports", message: "must be unique"},
	{name: "port name not a DNS label", spec: "ports: [{name: Web_Port, port: 80}]\nselector: {app: x}\n", field: "spec.ports[0].name"},
	{name: "unknown protocol", spec: "ports: [{port: 80, protocol: HTTP}]\nselector: {app: x}\n", field: "spec.ports[0].protocol"},
	{name: "targetPort zero", spec: "ports: [{port: 80, targetPort: 0}]\nselector: {app: x}\n", field: "spec.ports[0].targetPort"},
	{name: "targetPort name too long", spec: "ports: [{port: 80, targetPort: averyveryverylongname}]\nselector: {app: x}\n", field: "spec.ports[0].targetPort"},
	{name: "targetPort name without a letter", spec: "ports: [{port: 80, targetPort: \"80-80\"}]\nselector: {app: x}\n", field: "spec.ports[0].targetPort"},
	{name: "externalTrafficPolicy on ClusterIP", spec: "externalTrafficPolicy: Local\n" + okPorts, field: "spec.externalTrafficPolicy"},
	{name: "healthCheckNodePort without Local", spec: "type: LoadBalancer\nhealthCheckNodePort: 32000\n" + okPorts, field: "spec.healthCheckNodePort"},
	{name: "nodePort on ClusterIP", spec: "ports: [{port: 80, nodePort: 30080}]\nselector: {app: x}\n", field: "spec.ports", message: "nodePort"},
	{name: "headless NodePort", spec: "type: NodePort\nclusterIP: None\n" + okPorts, field: "spec.clusterIP"},
	{name: "unknown IP family", spec: "ipFamilies: [IPv5]\n" + okPorts, field: "spec.ipFamilies[0]"},
	{name: "name not a DNS-1035 label", objectName: "db.read", spec: okPorts, field: "metadata.name"},

	// The healthcheck section.
	{name: "periodSeconds zero", spec: okPorts + "healthcheck: {periodSeconds: 0}\n", field: "spec.healthcheck.periodSeconds"},
	{name: "fast period longer than the period", spec: okPorts + "healthcheck: {periodSeconds: 5, fastPeriodSeconds: 6}\n", field: "spec.healthcheck.fastPeriodSeconds", message: "must not exceed spec.healthcheck.periodSeconds"},
	{name: "fast period zero", spec: okPorts + "healthcheck: {fastPeriodSeconds: 0}\n", field: "spec.healthcheck.fastPeriodSeconds"},
	{name: "down period shorter than the period", spec: okPorts + "healthcheck: {periodSeconds: 10, downPeriodSeconds: 5}\n", field: "spec.healthcheck.downPeriodSeconds", message: "must not be below spec.healthcheck.periodSeconds"},
	{name: "flap damping cap below its base", spec: okPorts + "healthcheck: {flapDamping: {baseEjectionSeconds: 60, maxEjectionSeconds: 30}}\n", field: "spec.healthcheck.flapDamping.maxEjectionSeconds", message: "must not be below baseEjectionSeconds"},
	{name: "flap damping base zero", spec: okPorts + "healthcheck: {flapDamping: {baseEjectionSeconds: 0}}\n", field: "spec.healthcheck.flapDamping.baseEjectionSeconds"},
	{name: "down period too long", spec: okPorts + "healthcheck: {downPeriodSeconds: 3601}\n", field: "spec.healthcheck.downPeriodSeconds"},
	{name: "negative initialDelaySeconds", spec: okPorts + "healthcheck: {initialDelaySeconds: -5}\n", field: "spec.healthcheck.initialDelaySeconds"},
	{name: "unknown mode", spec: probeOpen + "mode: ICMP\n", field: "spec.healthcheck.probes[0].mode"},
	{name: "TCP mode with an http object", spec: probeOpen + "mode: TCP\n    http: {targetPort: 2525}\n", field: "spec.healthcheck.probes[0].http", message: "http may only be set when mode is HTTP"},
	{name: "HTTP mode without http", spec: probeOpen + "mode: HTTP\n", field: "spec.healthcheck.probes[0].http", message: "http is required when mode is HTTP"},
	{name: "TCP mode with an http object names tcp too", spec: probeOpen + "mode: TCP\n    http: {targetPort: 2525}\n", field: "spec.healthcheck.probes[0].tcp", message: "tcp is required when mode is TCP"},
	{name: "TCP mode with a postgreSQL object too", spec: tcpProbeOK + "    postgreSQL: {targetPort: 5432}\n", field: "spec.healthcheck.probes[0].postgreSQL"},
	{name: "timeoutSeconds zero", spec: tcpProbeOK + "    timeoutSeconds: 0\n", field: "spec.healthcheck.probes[0].timeoutSeconds"},
	{name: "failureThreshold zero", spec: tcpProbeOK + "    failureThreshold: 0\n", field: "spec.healthcheck.probes[0].failureThreshold"},
	{name: "negative successThreshold", spec: tcpProbeOK + "    successThreshold: -1\n", field: "spec.healthcheck.probes[0].successThreshold"},
	{name: "timeout longer than the period", spec: okPorts + "healthcheck:\n  periodSeconds: 2\n  probes:\n  - mode: TCP\n    timeoutSeconds: 5\n    tcp: {targetPort: 8080}\n", field: "spec.healthcheck.probes", message: "timeoutSeconds"},
	{name: "tcp targetPort above 65535", spec: probeOpen + "mode: TCP\n    tcp: {targetPort: 65536}\n", field: "spec.healthcheck.probes[0].tcp.targetPort"},
	{name: "tcp without targetPort", spec: probeOpen + "mode: TCP\n    tcp: {}\n", field: "spec.healthcheck.probes[0].tcp.targetPort"},
	{name: "http path without a slash", spec: httpProbe + "      path: healthz\n", field: "spec.healthcheck.probes[0].http.path"},
	{name: "http path with a space", spec: httpProbe + "      path: /health z\n", field: "spec.healthcheck.probes[0].http.path"},
	{name: "http method POST", spec: httpProbe + "      method: POST\n", field: "spec.healthcheck.probes[0].http.method"},
	{name: "http scheme FTP", spec: httpProbe + "      scheme: FTP\n", field: "spec.healthcheck.probes[0].http.scheme"},
	{name: "invalid header name", spec: httpProbe + "      httpHeaders: [{name: \"Bad Header\", value: x}]\n", field: "spec.healthcheck.probes[0].http.httpHeaders[0].name"},
	{name: "framing header", spec: httpProbe + "      httpHeaders: [{name: transfer-Encoding, value: chunked}]\n", field: "spec.healthcheck.probes[0].http.httpHeaders[0].name"},
	{name: "header value with a newline", spec: httpProbe + "      httpHeaders: [{name: X-A, value: \"a\\r\\nInjected: yes\"}]\n", field: "spec.healthcheck.probes[0].http.httpHeaders[0].value"},
	{name: "host twice", spec: httpProbe + "      host: a.example.com\n      httpHeaders: [{name: Host, value: b.example.com}]\n", field: "spec.healthcheck.probes[0].http.httpHeaders"},
	{name: "host with a path", spec: httpProbe + "      host: a.example.com/x\n", field: "spec.healthcheck.probes[0].http.host"},
	{name: "insecureSkipTLSVerify over HTTP", spec: httpProbe + "      insecureSkipTLSVerify: true\n", field: "spec.healthcheck.probes[0].http.insecureSkipTLSVerify"},
	{name: "caCert that is not PEM", spec: httpProbe + "      scheme: HTTPS\n      caCert: not-a-certificate\n", field: "spec.healthcheck.probes[0].http.caCert"},
	{name: "status code 600", spec: httpProbe + "      expectedStatusCodes: [\"600\"]\n", field: "spec.healthcheck.probes[0].http.expectedStatusCodes[0]"},
	{name: "status range written high-low", spec: httpProbe + "      expectedStatusCodes: [\"399-200\"]\n", field: "spec.healthcheck.probes[0].http.expectedStatusCodes"},
	{name: "empty status code list", spec: httpProbe + "      expectedStatusCodes: []\n", field: "spec.healthcheck.probes[0].http.expectedStatusCodes"},
	{name: "postgreSQL tlsMode prefer", spec: probeOpen + "mode: PostgreSQL\n    postgreSQL: {targetPort: 5432, tlsMode: prefer}\n", field: "spec.healthcheck.probes[0].postgreSQL.tlsMode"},
	{name: "verify-full without a Secret", spec: probeOpen + "mode: PostgreSQL\n    postgreSQL: {targetPort: 5432, tlsMode: verify-full}\n", field: "spec.healthcheck.probes[0].postgreSQL.authSecretName"},
	{name: "invalid Secret name", spec: probeOpen + "mode: PostgreSQL\n    postgreSQL: {targetPort: 5432, authSecretName: Cred_Secret}\n", field: "spec.healthcheck.probes[0].postgreSQL.authSecretName"},
	{name: "empty query", spec: probeOpen + "mode: PostgreSQL\n    postgreSQL: {targetPort: 5432, query: \"\"}\n", field: "spec.healthcheck.probes[0].postgreSQL.query"},

	// TCP scripts, HTTP bodies, gRPC, Redis and MySQL.
	{name: "empty tcp step", spec: probeOpen + "mode: TCP\n    tcp: {targetPort: 25, steps: [{}]}\n", field: "spec.healthcheck.probes[0].tcp.steps[0]", message: "send, sendBytes or expect"},
	{name: "tcp step with send and sendBytes", spec: probeOpen + "mode: TCP\n    tcp: {targetPort: 25, steps: [{send: a, sendBytes: YQ==}]}\n", field: "spec.healthcheck.probes[0].tcp.steps[0].sendBytes", message: "not both"},
	{name: "tcp expect with two patterns", spec: probeOpen + "mode: TCP\n    tcp: {targetPort: 25, steps: [{expect: {text: \"220\", regexp: \"^220\"}}]}\n", field: "spec.healthcheck.probes[0].tcp.steps[0].expect", message: "exactly one of text, bytes and regexp"},
	{name: "tcp expect with an invalid regexp", spec: probeOpen + "mode: TCP\n    tcp: {targetPort: 25, steps: [{expect: {regexp: \"^(220\"}}]}\n", field: "spec.healthcheck.probes[0].tcp.steps[0].expect.regexp", message: "RE2"},
	{name: "tcp send over 4 KiB of UTF-8", spec: probeOpen + "mode: TCP\n    tcp: {targetPort: 25, steps: [{send: \"" + strings.Repeat("é", 2049) + "\"}]}\n", field: "spec.healthcheck.probes[0].tcp.steps[0].send", message: "4096 bytes"},
	{name: "grpc service over 1 KiB of UTF-8", spec: probeOpen + "mode: GRPC\n    grpc: {targetPort: 50051, service: \"" + strings.Repeat("é", 513) + "\"}\n", field: "spec.healthcheck.probes[0].grpc.service", message: "1024 bytes"},
	{name: "tcp with 17 steps", spec: probeOpen + "mode: TCP\n    tcp: {targetPort: 25, steps: [" + strings.Repeat("{send: a},", 16) + "{send: a}]}\n", field: "spec.healthcheck.probes[0].tcp.steps"},
	{name: "tcp TLS with CA and insecure", spec: probeOpen + "mode: TCP\n    tcp: {targetPort: 465, tls: {caCert: \"-----BEGIN CERTIFICATE-----\", insecureSkipTLSVerify: true}}\n", field: "spec.healthcheck.probes[0].tcp.tls.caCert", message: "mutually exclusive"},
	{name: "http body on HEAD", spec: httpProbe + "      method: HEAD\n      expectBody: {text: ok}\n", field: "spec.healthcheck.probes[0].http.expectBody", message: "GET"},
	{name: "http body without a pattern", spec: httpProbe + "      expectBody: {withinBytes: 100}\n", field: "spec.healthcheck.probes[0].http.expectBody", message: "exactly one of text and regexp"},
	{name: "http body window above 64 KiB", spec: httpProbe + "      expectBody: {text: ok, withinBytes: 65537}\n", field: "spec.healthcheck.probes[0].http.expectBody.withinBytes"},
	{name: "http body invalid regexp", spec: httpProbe + "      expectBody: {regexp: \"a(?P<\"}\n", field: "spec.healthcheck.probes[0].http.expectBody.regexp", message: "RE2"},
	{name: "GRPC mode without grpc", spec: probeOpen + "mode: GRPC\n", field: "spec.healthcheck.probes[0].grpc", message: "grpc is required when mode is GRPC"},
	{name: "grpc reserved metadata", spec: probeOpen + "mode: GRPC\n    grpc: {targetPort: 50051, metadata: [{name: grpc-timeout, value: 1S}]}\n", field: "spec.healthcheck.probes[0].grpc.metadata[0].name", message: "reserved"},
	{name: "grpc binary metadata", spec: probeOpen + "mode: GRPC\n    grpc: {targetPort: 50051, metadata: [{name: token-bin, value: AA}]}\n", field: "spec.healthcheck.probes[0].grpc.metadata[0].name", message: "-bin"},
	{name: "grpc uppercase metadata", spec: probeOpen + "mode: GRPC\n    grpc: {targetPort: 50051, metadata: [{name: Token, value: x}]}\n", field: "spec.healthcheck.probes[0].grpc.metadata[0].name"},
	{name: "redis object on a TCP probe", spec: tcpProbeOK + "    redis: {targetPort: 6379}\n", field: "spec.healthcheck.probes[0].redis", message: "redis may only be set when mode is Redis"},
	{name: "redis unknown role", spec: probeOpen + "mode: Redis\n    redis: {targetPort: 6379, role: Primary}\n", field: "spec.healthcheck.probes[0].redis.role"},
	{name: "redis lag on the master", spec: probeOpen + "mode: Redis\n    redis: {targetPort: 6379, role: Master, maxReplicationLag: {seconds: 30}}\n", field: "spec.healthcheck.probes[0].redis.maxReplicationLag", message: "role Master"},
	{name: "redis empty lag", spec: probeOpen + "mode: Redis\n    redis: {targetPort: 6379, maxReplicationLag: {}}\n", field: "spec.healthcheck.probes[0].redis.maxReplicationLag", message: "bytes or seconds"},
	{name: "redis verify-full without a Secret", spec: probeOpen + "mode: Redis\n    redis: {targetPort: 6379, tlsMode: verify-full}\n", field: "spec.healthcheck.probes[0].redis.authSecretName"},
	{name: "MySQL mode without mySQL", spec: probeOpen + "mode: MySQL\n", field: "spec.healthcheck.probes[0].mySQL", message: "mySQL is required when mode is MySQL"},
	{name: "mySQL tlsMode preferred", spec: probeOpen + "mode: MySQL\n    mySQL: {targetPort: 3306, tlsMode: preferred}\n", field: "spec.healthcheck.probes[0].mySQL.tlsMode"},
	{name: "mySQL verify-ca without a Secret", spec: probeOpen + "mode: MySQL\n    mySQL: {targetPort: 3306, tlsMode: verify-ca}\n", field: "spec.healthcheck.probes[0].mySQL.authSecretName"},

	// The disruption budget and the readiness gate.
	{name: "budget with both limits", spec: okPorts + "disruptionBudget: {minAvailable: 2, maxUnavailable: 1}\n", field: "spec.disruptionBudget", message: "exactly one of minAvailable and maxUnavailable"},
	{name: "budget with no limit", spec: okPorts + "disruptionBudget: {ports: []}\n", field: "spec.disruptionBudget", message: "exactly one"},
	{name: "negative minAvailable", spec: okPorts + "disruptionBudget: {minAvailable: -1}\n", field: "spec.disruptionBudget.minAvailable"},
	{name: "maxUnavailable above 100%", spec: okPorts + "disruptionBudget: {maxUnavailable: \"150%\"}\n", field: "spec.disruptionBudget.maxUnavailable"},
	{name: "maxUnavailable not a percentage", spec: okPorts + "disruptionBudget: {maxUnavailable: half}\n", field: "spec.disruptionBudget.maxUnavailable"},
	{name: "budget port that does not exist", spec: "ports: [{name: client, port: 9092}]\nselector: {app: x}\ndisruptionBudget: {maxUnavailable: 1, ports: [replication]}\n", field: "spec.disruptionBudget.ports", message: "must name ports of spec.ports"},
	{name: "exclusive port that does not exist", spec: "ports: [{name: write, port: 5432}]\nselector: {app: x}\nexclusive: {ports: [read]}\n", field: "spec.exclusive.ports", message: "must name ports of spec.ports"},
	{name: "exclusive with publishNotReadyAddresses", spec: okPorts + "publishNotReadyAddresses: true\nexclusive: {}\n", field: "spec.exclusive", message: "publishNotReadyAddresses"},
	{name: "exclusive lease too short", spec: okPorts + "exclusive: {leaseDurationSeconds: 1}\n", field: "spec.exclusive.leaseDurationSeconds"},
	{name: "unknown unhealthyPodEvictionPolicy", spec: okPorts + "disruptionBudget: {maxUnavailable: 1, unhealthyPodEvictionPolicy: Never}\n", field: "spec.disruptionBudget.unhealthyPodEvictionPolicy"},
	{name: "unknown readiness gate mode", spec: okPorts + "readinessGate: {mode: Sometimes}\n", field: "spec.readinessGate.mode"},

	// A port's floor.
	{name: "floor minPassing zero", spec: "ports: [{port: 80, floor: {minPassing: 0}}]\nselector: {app: x}\n", field: "spec.ports[0].floor.minPassing", message: "from 1"},
	{name: "floor minPassing 0%", spec: "ports: [{port: 80, floor: {minPassing: \"0%\"}}]\nselector: {app: x}\n", field: "spec.ports[0].floor.minPassing", message: "from 1% to 100%"},
	{name: "floor minPassing above 100%", spec: "ports: [{port: 80, floor: {minPassing: \"150%\"}}]\nselector: {app: x}\n", field: "spec.ports[0].floor.minPassing", message: "from 1% to 100%"},
	{name: "floor minPassing not a percentage", spec: "ports: [{port: 80, floor: {minPassing: half}}]\nselector: {app: x}\n", field: "spec.ports[0].floor.minPassing"},
	{name: "floor without minPassing", spec: "ports: [{port: 80, floor: {below: Open}}]\nselector: {app: x}\n", field: "spec.ports[0].floor.minPassing"},
	{name: "floor with an unknown mode", spec: "ports: [{port: 80, floor: {minPassing: 1, below: Panic}}]\nselector: {app: x}\n", field: "spec.ports[0].floor.below"},
	{name: "floor Open on an exclusive port", spec: "ports: [{name: write, port: 5432, floor: {minPassing: 1, below: Open}}]\nselector: {app: x}\nexclusive: {}\n", field: "spec.ports", message: "must be Closed on an exclusive port"},
	{name: "floor Freeze on a port spec.exclusive names", spec: "ports: [{name: read, port: 5433}, {name: write, port: 5432, floor: {minPassing: 1, below: Freeze}}]\nselector: {app: x}\nexclusive: {ports: [write]}\n", field: "spec.ports", message: "must be Closed on an exclusive port"},
}
