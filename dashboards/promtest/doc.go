// Package promtest runs a real Prometheus server for tests: it finds (or,
// as root on Debian and Ubuntu, installs) the prometheus and promtool
// binaries, starts Prometheus on a loopback port with a throwaway storage
// directory, a scrape configuration and rule files given by the test, and
// queries its HTTP API.
//
// It must never listen on anything but loopback, keep data after the test,
// or change a rule file: Prometheus loads the project's rule files as they
// are.
package promtest
