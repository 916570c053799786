module github.com/swh-dev/swh/probes

go 1.26.0

require (
	github.com/lib/pq v1.12.3
	go.uber.org/goleak v1.3.0
)
