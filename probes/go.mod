module github.com/swh-dev/swh/probes

go 1.26.0
