package egress

import (
	"errors"
	"net/netip"
	"net/url"
	"testing"
)

// The seed corpus lives in testdata/fuzz/FuzzValidateURL.

func FuzzValidateURL(f *testing.F) {
	policies := []Policy{{}, loopbackPolicy}
	f.Fuzz(func(t *testing.T, raw string) {
		for _, p := range policies {
			if err := p.ValidateURL(raw); err != nil {
				if !errors.Is(err, ErrDenied) {
					t.Fatalf("untyped error %v", err)
				}
				continue
			}
			u, err := url.Parse(raw)
			if err != nil {
				t.Fatalf("accepted unparsable %q", raw)
			}
			if u.Scheme != "https" && !(p.AllowHTTP && u.Scheme == "http") {
				t.Fatalf("accepted scheme %q with AllowHTTP=%v", u.Scheme, p.AllowHTTP)
			}
			if u.User != nil || u.Host == "" {
				t.Fatalf("accepted %q with userinfo or without host", raw)
			}
			if addr, err := netip.ParseAddr(u.Hostname()); err == nil {
				if err := p.guardian().SafeAddr(addr.Unmap()); err != nil {
					t.Fatalf("accepted forbidden address in %q: %v", raw, err)
				}
			}
		}
	})
}
