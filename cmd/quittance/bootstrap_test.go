package main

import (
	"context"
	"net/http"
	"testing"
)

// TestRevokedBootstrapTokenDoesNotStopServe: an operator retires the
// bootstrap credential (revokes it) while QUITTANCE_BOOTSTRAP_TOKEN is still
// in the configuration. A replica starting after that starts and serves;
// the credential stays revoked on it.
func TestRevokedBootstrapTokenDoesNotStopServe(t *testing.T) {
	t.Parallel()
	e := startService(t)
	ids, err := e.query(context.Background(),
		`SELECT t.id::text FROM api_tokens t JOIN principals p ON p.id = t.principal_id WHERE p.bootstrap`)
	if err != nil || len(ids) != 1 {
		t.Fatalf("the bootstrap credential: %v, %v", ids, err)
	}
	if s := e.api(t, http.MethodPost, "/admin/v1/credentials/"+ids[0]+"/revoke", e.oncall, map[string]any{"reason": "retired"}, nil); s != http.StatusOK {
		t.Fatalf("revoke the bootstrap credential: %d", s)
	}
	second := startServe(t, e.env)
	c := newTestClient(second.api)
	if res := c.do(t.Context(), http.MethodGet, "/readyz", "", nil); res.status != http.StatusOK {
		t.Fatalf("/readyz on the replica started after the revocation: %v", res)
	}
	if res := c.do(t.Context(), http.MethodPost, "/admin/v1/tokens", e.bootstrap, map[string]any{"role": "oncall", "name": "mallory"}); res.status != http.StatusUnauthorized {
		t.Fatalf("the revoked bootstrap credential on the new replica: %v", res)
	}
}
