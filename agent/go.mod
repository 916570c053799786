module github.com/swh-dev/swh/agent

go 1.26.0
