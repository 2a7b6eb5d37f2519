// Package deploy holds how Quittance is deployed: the container image
// (Dockerfile), the Kubernetes manifests (kubernetes/, applied with kustomize), and the
// systemd unit (systemd/). It is its own Go module so that the Kubernetes and
// prometheus-operator API types its tests decode the manifests into never become
// dependencies of the service.
//
// The package has no code; its tests check the manifests. It must never be imported by
// the service.
package deploy
