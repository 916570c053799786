module github.com/swh-dev/swh/controller

go 1.26.0
