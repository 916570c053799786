module github.com/swh-dev/swh/test

go 1.26.0
