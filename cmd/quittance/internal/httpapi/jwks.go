package httpapi

import "net/http"

// registerJWKS serves the ledger's public JWK Set at /.well-known/jwks.json:
// the keys remote orgs verify Quittance's signed compensation requests
// with. It is public (no token) and outside the OpenAPI document.
func (s *Server) registerJWKS() {
	if s.jwks == nil {
		return
	}
	s.mux.HandleFunc("GET /.well-known/jwks.json", s.serveJWKS)
}

// serveJWKS writes the ledger's public JWK Set, cacheable for five minutes.
func (s *Server) serveJWKS(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/jwk-set+json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(s.jwks())
}
