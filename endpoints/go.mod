module github.com/swh-dev/swh/endpoints

go 1.26.0
