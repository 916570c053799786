// Package tools records the upstream commands this repository builds from
// source (see the tool directives in go.mod). It contains no code.
package tools
