module github.com/swh-dev/swh/probes

go 1.26.0

require (
	github.com/go-sql-driver/mysql v1.10.2
	github.com/lib/pq v1.12.3
	go.uber.org/goleak v1.3.0
)

require filippo.io/edwards25519 v1.2.0 // indirect
