// Package errkind sorts the domain's errors into kinds and holds the one
// table of the HTTP status each kind is answered with, shared by the API
// (problem+json) and the console (error pages).
//
// It must never hold wording, problem codes or pages: those belong to the
// surface that shows the error. It decides only what kind an error is and
// which status that kind gets.
package errkind
