package main

import (
	"net/http"
	"testing"
)

// twoOncall creates, with the bootstrap token, the two on-call principals
// it may create outside dev, and returns their tokens.
func twoOncall(t testing.TB, c *testClient, bootstrap string) (string, string) {
	t.Helper()
	mk := func(name string) string {
		var out struct {
			Token string `json:"token"`
		}
		c.must(t, http.MethodPost, "/admin/v1/tokens", bootstrap, map[string]any{"role": "oncall", "name": name}, &out, http.StatusCreated)
		if out.Token == "" {
			t.Fatal("token response without a token")
		}
		return out.Token
	}
	return mk("alice"), mk("bob")
}

// mustPrivileged does a privileged change with token and, when it waits for
// a second on-call principal (202), approves it with approver.
func mustPrivileged(t testing.TB, c *testClient, method, path, token, approver string, body any) {
	t.Helper()
	var out struct {
		PendingChange *struct {
			ID string `json:"id"`
		} `json:"pending_change"`
	}
	c.must(t, method, path, token, body, &out, http.StatusOK, http.StatusCreated, http.StatusAccepted)
	if out.PendingChange != nil {
		c.must(t, http.MethodPost, "/admin/v1/pending-changes/"+out.PendingChange.ID+"/approve", approver, nil, nil, http.StatusOK)
	}
}
