package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/quittance/quittance/ledger"
)

// OrgKeyBody is one key of an org's key history.
type OrgKeyBody struct {
	KeyID      string          `json:"kid"`
	Thumbprint string          `json:"thumbprint" doc:"RFC 7638 JWK thumbprint (SHA-256, base64url)."`
	JWK        json.RawMessage `json:"jwk" doc:"The public key as registered."`
	ValidFrom  time.Time       `json:"valid_from"`
	ValidUntil *time.Time      `json:"valid_until,omitempty" doc:"When the key stopped being in force; absent while it is."`
	InForce    bool            `json:"in_force"`
}

func orgKeyBodies(keys []ledger.OrgKey) []OrgKeyBody {
	out := make([]OrgKeyBody, len(keys))
	for i, k := range keys {
		out[i] = OrgKeyBody{
			KeyID: k.KeyID, Thumbprint: k.Thumbprint, JWK: k.JWK, ValidFrom: k.ValidFrom,
			ValidUntil: timePtr(k.ValidUntil), InForce: k.ValidUntil.IsZero(),
		}
	}
	return out
}

// registerOrgKeys is the route table of an org's key history and its JWKS
// refresh.
func (s *Server) registerOrgKeys() {
	huma.Register(s.api, huma.Operation{
		OperationID: "get-org-keys", Method: http.MethodGet, Path: "/admin/v1/orgs/{id}/keys", Tags: []string{"admin"},
		Summary:     "An org's key history: current and past keys with thumbprints and validity",
		Description: "Every public key the org was ever registered with, with its RFC 7638 thumbprint and the interval it was in force. On-call and finance.",
		Security:    bearerAuth,
	}, s.getOrgKeys)
	huma.Register(s.api, huma.Operation{
		OperationID: "refresh-org-keys", Method: http.MethodPost, Path: "/admin/v1/orgs/{id}/keys/refresh", Tags: []string{"admin"},
		Summary: "Fetch an org's JWKS URL now",
		Description: "Fetches the org's JWKS URL at once, as the periodic refresh does, and answers the org with its jwks_fetch state and the keys added and removed. " +
			"A fetch that fails or serves an invalid set changes no key: the answer is still 200, with jwks_fetch.error. An org whose keys are inline is 409 org_has_no_jwks_url. On-call.",
		Security: bearerAuth,
	}, s.refreshOrgKeys)
}

type orgKeysOutput struct {
	Body struct {
		OrgID string       `json:"org_id"`
		Keys  []OrgKeyBody `json:"keys" doc:"Every key the org ever had, oldest first."`
	}
}

// getOrgKeys serves GET /admin/v1/orgs/{id}/keys: an org's key history:
// current and past keys with thumbprints and validity.
func (s *Server) getOrgKeys(ctx context.Context, in *idPathInput) (*orgKeysOutput, error) {
	keys, err := s.ledger.OrgKeyHistory(ctx, principal(ctx), in.ID)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	out := &orgKeysOutput{}
	out.Body.OrgID, out.Body.Keys = in.ID, orgKeyBodies(keys)
	return out, nil
}

type refreshOrgKeysOutput struct {
	Body struct {
		Org         OrgBody      `json:"org"`
		KeysAdded   []KeyRefBody `json:"keys_added" doc:"Keys the fetch brought into force."`
		KeysRemoved []KeyRefBody `json:"keys_removed" doc:"Keys the fetch ended (no longer served at the URL)."`
	}
}

// refreshOrgKeys serves POST /admin/v1/orgs/{id}/keys/refresh: fetch an
// org's JWKS URL now.
func (s *Server) refreshOrgKeys(ctx context.Context, in *idPathInput) (*refreshOrgKeysOutput, error) {
	o, r, err := s.ledger.RefreshOrgKeys(ctx, principal(ctx), in.ID)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	out := &refreshOrgKeysOutput{}
	out.Body.Org, out.Body.KeysAdded, out.Body.KeysRemoved = orgBody(o), keyRefs(r.Added), keyRefs(r.Removed)
	return out, nil
}

// KeyRefBody names a key by kid and RFC 7638 thumbprint.
type KeyRefBody struct {
	KeyID      string `json:"kid"`
	Thumbprint string `json:"thumbprint"`
}

func keyRefs(refs []ledger.KeyRef) []KeyRefBody {
	out := make([]KeyRefBody, len(refs))
	for i, r := range refs {
		out[i] = KeyRefBody(r)
	}
	return out
}
