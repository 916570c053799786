// Package tools records the upstream commands this repository builds from
// source (see the tool directives in go.mod) and holds the project's own
// build commands: cmd/crd-docs (the API reference, make generate) and
// cmd/modcheck (module rules, make verify). This package has no code.
package tools
