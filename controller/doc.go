// Package controller will hold swh-controller: it creates the selector-less
// Service of every ServiceWithHealthchecks, aggregates status from the
// agents' EndpointSlices and removes slices nobody owns any more. See issue 5
// and DESIGN.md §1.
package controller
