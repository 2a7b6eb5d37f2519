package jose

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// jwksFetchTimeout bounds one fetch of an org's JWKS URL.
const jwksFetchTimeout = 10 * time.Second

// NewJWKSFetcher returns the function the ledger fetches an org's JWKS URL
// with (ledger.Config.FetchJWKS): one GET through client — the SSRF-safe
// egress client, so the URL must pass the egress policy on every redirect
// and every address it resolves to — bounded to ten seconds and to
// MaxJWKSSize bytes. Anything but a 200 is an error; the
// document itself is validated by the ledger (ParseOrgJWKS).
func NewJWKSFetcher(client *http.Client) func(ctx context.Context, url string) ([]byte, error) {
	return func(ctx context.Context, url string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(ctx, jwksFetchTimeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return nil, fmt.Errorf("fetch JWKS: %w", err)
		}
		req.Header.Set("Accept", "application/jwk-set+json, application/json")
		resp, err := client.Do(req)
		if err != nil {
			return nil, fmt.Errorf("fetch JWKS: %w", err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("fetch JWKS: %s answered %s", url, resp.Status)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, MaxJWKSSize+1))
		if err != nil {
			return nil, fmt.Errorf("fetch JWKS: read the body: %w", err)
		}
		if len(body) > MaxJWKSSize {
			return nil, fmt.Errorf("fetch JWKS: the document is larger than %d bytes", MaxJWKSSize)
		}
		return body, nil
	}
}
