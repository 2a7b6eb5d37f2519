package main

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"

	"github.com/quittance/quittance/delegate/egress"
	"github.com/quittance/quittance/ledger"
)

// config is the service's configuration, read from the environment. Every
// variable is listed in deploy/CONFIGURATION.md, and a test checks that the
// table there names exactly the variables read here.
type config struct {
	DatabaseURL string `env:"DATABASE_URL"`
	// MigrationDatabaseURL is the database as the role that owns the
	// schema: migrations run as it, and the service itself connects with
	// DatabaseURL, as a role that cannot rewrite the audit log
	// (ledger/AUDIT.md). Unset, migrations run with DatabaseURL.
	MigrationDatabaseURL string `env:"QUITTANCE_MIGRATION_DATABASE_URL"`
	// ReadDatabaseURL, when set, is a standby of DatabaseURL that serves
	// the reads that tolerate lag (readPoolConfig, ledger/DESIGN.md §7).
	ReadDatabaseURL string `env:"QUITTANCE_READ_DATABASE_URL"`
	// CheckpointInterval is how often the ledger signs a checkpoint over
	// the heads of the event streams that moved since the previous one
	// (when any did).
	CheckpointInterval time.Duration `env:"QUITTANCE_CHECKPOINT_INTERVAL" envDefault:"1m"`
	// Checkpoints is "on" or "off". On (the default), the service refuses
	// to start without SigningKeyFile: without checkpoints nothing anchors
	// the end of a stream, and a tail the schema's owner deletes goes
	// unnoticed (ledger/AUDIT.md). Off, it starts without a key and signs
	// no periodic checkpoints: an explicit choice, never a default.
	Checkpoints string `env:"QUITTANCE_CHECKPOINTS" envDefault:"on"`

	// EvidenceRefusalTime is how long after it arrived a posted token
	// refused without a reason told is answered, so that response times do
	// not tell which orgs, keys and tasks exist (compensation.Config.RefusalTime).
	EvidenceRefusalTime time.Duration `env:"QUITTANCE_EVIDENCE_REFUSAL_TIME" envDefault:"500ms"`

	// OrgJWKSRefresh is how often the JWKS URL of every org registered by
	// URL is fetched; OrgJWKSUnknownKidInterval the shortest time between
	// two fetches of one org's URL for tokens naming an unknown kid.
	OrgJWKSRefresh            time.Duration `env:"QUITTANCE_ORG_JWKS_REFRESH" envDefault:"15m"`
	OrgJWKSUnknownKidInterval time.Duration `env:"QUITTANCE_ORG_JWKS_UNKNOWN_KID_INTERVAL" envDefault:"1m"`
	Addr                      string        `env:"QUITTANCE_ADDR" envDefault:"127.0.0.1:8080"`
	DataDir                   string        `env:"QUITTANCE_DATA_DIR" envDefault:"./.quittance"`
	LedgerID                  string        `env:"QUITTANCE_LEDGER_ID" envDefault:"quittance"`
	BootstrapToken            string        `env:"QUITTANCE_BOOTSTRAP_TOKEN"`
	PublicURL                 string        `env:"QUITTANCE_PUBLIC_URL"`
	SweepInterval             time.Duration `env:"QUITTANCE_SWEEP_INTERVAL" envDefault:"30s"`
	// WriteOffApprovalThresholdMinor is the amount above which a write-off
	// needs a second on-call approver.
	WriteOffApprovalThresholdMinor int64 `env:"QUITTANCE_WRITE_OFF_APPROVAL_THRESHOLD_MINOR" envDefault:"100000"`
	// WriteOffApprovalThresholdsMinor gives some currencies thresholds of
	// their own: "JPY=10000000,EUR=50000" (ISO 4217 code=minor units).
	WriteOffApprovalThresholdsMinor string        `env:"QUITTANCE_WRITE_OFF_APPROVAL_THRESHOLDS_MINOR"`
	EgressAllowCIDRs                string        `env:"QUITTANCE_EGRESS_ALLOW_CIDRS"`
	PollAfter                       time.Duration `env:"QUITTANCE_POLL_AFTER" envDefault:"60s"`
	LogLevel                        slog.Level    `env:"QUITTANCE_LOG_LEVEL" envDefault:"info"`
	ShutdownTimeout                 time.Duration `env:"QUITTANCE_SHUTDOWN_TIMEOUT" envDefault:"20s"`
	// RateLimitRPS and RateLimitBurst are each token bucket of the API and
	// the console (per principal, or per client address for requests not
	// known to be a principal's); 0 RPS disables them. RateLimitMaxBuckets
	// bounds how many buckets each of the limiter's tables keeps (principals,
	// proven addresses, other addresses); past it new keys of that table
	// share one.
	RateLimitRPS        float64 `env:"QUITTANCE_RATE_LIMIT_RPS" envDefault:"50"`
	RateLimitBurst      int     `env:"QUITTANCE_RATE_LIMIT_BURST" envDefault:"100"`
	RateLimitMaxBuckets int     `env:"QUITTANCE_RATE_LIMIT_MAX_BUCKETS" envDefault:"100000"`
	// EgressAllowHTTP permits plain-http outbound A2A calls (dev and tests
	// only); `quittance dev` turns it on.
	EgressAllowHTTP bool `env:"QUITTANCE_EGRESS_ALLOW_HTTP" envDefault:"false"`
	// A2AInterval is how often the A2A workers look for due outbound calls.
	A2AInterval time.Duration `env:"QUITTANCE_A2A_INTERVAL" envDefault:"1s"`
	// A2ALease is how long a worker holds a claimed outbound call before
	// another replica may retry it.
	A2ALease time.Duration `env:"QUITTANCE_A2A_LEASE" envDefault:"2m"`
	// A2ABackoffBase and A2ABackoffMax bound the retry backoff of outbound
	// A2A calls and of orgs whose agent fails.
	A2ABackoffBase time.Duration `env:"QUITTANCE_A2A_BACKOFF_BASE" envDefault:"2s"`
	A2ABackoffMax  time.Duration `env:"QUITTANCE_A2A_BACKOFF_MAX" envDefault:"5m"`
	// CompensationMaxAttempts is how many compensation requests are sent
	// over A2A before the obligation becomes compensation_unconfirmed.
	CompensationMaxAttempts int `env:"QUITTANCE_COMPENSATION_MAX_ATTEMPTS" envDefault:"8"`
	// A2AStreaming subscribes to tasks whose agent card declares streaming.
	A2AStreaming bool `env:"QUITTANCE_A2A_STREAMING" envDefault:"true"`
	// SigningKeyFile holds the ledger's Ed25519 signing keys (a PEM PKCS #8
	// key, or a JWK Set of private keys whose first key signs); `dev`
	// generates one in the data directory.
	SigningKeyFile string `env:"QUITTANCE_SIGNING_KEY_FILE"`
	// WebhookMaxAttempts is how many delivery attempts are made before a
	// webhook delivery is dead-lettered.
	WebhookMaxAttempts int `env:"QUITTANCE_WEBHOOK_MAX_ATTEMPTS" envDefault:"40"`
	// WebhookBackoffBase and WebhookBackoffMax bound the backoff between
	// webhook delivery attempts.
	WebhookBackoffBase time.Duration `env:"QUITTANCE_WEBHOOK_BACKOFF_BASE" envDefault:"5s"`
	WebhookBackoffMax  time.Duration `env:"QUITTANCE_WEBHOOK_BACKOFF_MAX" envDefault:"1h"`
	// StreamHeartbeat is how long an event stream may be idle before a
	// heartbeat comment is sent.
	StreamHeartbeat time.Duration `env:"QUITTANCE_STREAM_HEARTBEAT" envDefault:"15s"`
	// StreamPoll is how often an event stream reads the table without a
	// LISTEN/NOTIFY wake-up.
	StreamPoll time.Duration `env:"QUITTANCE_STREAM_POLL" envDefault:"2s"`
	// StreamMaxPerPrincipal is how many event streams one principal may
	// have open on a replica, and StreamMaxOpen how many a replica serves
	// in all; past either, a stream is refused with 429 too_many_streams.
	StreamMaxPerPrincipal int `env:"QUITTANCE_STREAM_MAX_PER_PRINCIPAL" envDefault:"8"`
	StreamMaxOpen         int `env:"QUITTANCE_STREAM_MAX_OPEN" envDefault:"256"`
	// DebugAddr, when set, serves Go's runtime profiles (net/http/pprof)
	// on a listener of their own, never on the API's address. Off by
	// default: profiles show the service's internals and cost CPU while
	// they are taken, so bind it to loopback.
	DebugAddr string `env:"QUITTANCE_DEBUG_ADDR"`
	// MetricsAddr, when set, serves /metrics on a listener of its own and
	// no longer on Addr. Metrics carry what the public endpoints keep to
	// themselves (a refused token's reason and the org it named), so in
	// production this address must be reachable by Prometheus alone.
	// Unset, /metrics is served on Addr, as before it existed.
	MetricsAddr string `env:"QUITTANCE_METRICS_ADDR"`
	// ConsoleSessionTTL is how long a console sign-in lasts.
	ConsoleSessionTTL time.Duration `env:"QUITTANCE_CONSOLE_SESSION_TTL" envDefault:"8h"`
	// OIDCIssuerURL, when set, offers OpenID Connect sign-in to the
	// console (authorization code with PKCE) with OIDCClientID and
	// OIDCClientSecret; OIDCRedirectURL defaults to
	// QUITTANCE_PUBLIC_URL/console/oidc/callback. OIDCRoleClaim names the
	// ID token claim (default groups) whose values OIDCRoleMap maps to
	// roles: "value=oncall,value=finance".
	OIDCIssuerURL    string `env:"QUITTANCE_OIDC_ISSUER_URL"`
	OIDCClientID     string `env:"QUITTANCE_OIDC_CLIENT_ID"`
	OIDCClientSecret string `env:"QUITTANCE_OIDC_CLIENT_SECRET"`
	OIDCRedirectURL  string `env:"QUITTANCE_OIDC_REDIRECT_URL"`
	OIDCRoleClaim    string `env:"QUITTANCE_OIDC_ROLE_CLAIM" envDefault:"groups"`
	OIDCRoleMap      string `env:"QUITTANCE_OIDC_ROLE_MAP"`
	// UnconfirmedAlertGrace is how long an obligation may stay in
	// compensation_unconfirmed before QuittanceObligationUnconfirmed
	// fires; exported as quittance_unconfirmed_alert_grace_seconds, which
	// the rule compares with.
	UnconfirmedAlertGrace time.Duration `env:"QUITTANCE_UNCONFIRMED_ALERT_GRACE" envDefault:"15m"`
	// TrustedProxyHeader names the header that carries the client's
	// address behind a load balancer (X-Forwarded-For: its right-most
	// entry; any other: its whole value, which must be an IP address), for
	// the per-address rate limit. Unset, or when the value is not an
	// address, the connection's peer is the client. Set it only when every
	// request reaches the service through a proxy that sets that header.
	TrustedProxyHeader string `env:"QUITTANCE_TRUSTED_PROXY_HEADER"`
	// PersonCredentialTTL is how long a person's credential lasts unless
	// it is issued with its own expiry.
	PersonCredentialTTL time.Duration `env:"QUITTANCE_PERSON_CREDENTIAL_TTL" envDefault:"720h"`
	// PendingChangeTTL is how long a privileged change waits for its
	// second on-call approver before it expires.
	PendingChangeTTL time.Duration `env:"QUITTANCE_PENDING_CHANGE_TTL" envDefault:"24h"`
	// PersonCredentialMaxTTL is the longest a person's credential may be
	// issued for, its own expiry included.
	PersonCredentialMaxTTL time.Duration `env:"QUITTANCE_PERSON_CREDENTIAL_MAX_TTL" envDefault:"2160h"`
	// WriteBatchMax is the most operations one transaction of the write
	// coalescer carries (1: each its own), WriteFlushers how many such
	// transactions run at once, WriteQueueMax how many operations may wait
	// for one before writes are answered 503 (ledger/DESIGN.md §5, "The
	// write path").
	WriteBatchMax int `env:"QUITTANCE_WRITE_BATCH_MAX" envDefault:"64"`
	WriteFlushers int `env:"QUITTANCE_WRITE_FLUSHERS" envDefault:"2"`
	WriteQueueMax int `env:"QUITTANCE_WRITE_QUEUE_MAX" envDefault:"4096"`
	// dev is set by `quittance dev`: the bootstrap credential's changes
	// take effect at once.
	dev bool
	// createSigningKey makes the service generate SigningKeyFile when it is
	// missing (dev only).
	createSigningKey bool
	// publicURLFromListener makes the service, when PublicURL is empty,
	// use the address it listens on as PublicURL (dev with the demo agent):
	// that names the port chosen for port 0, which Addr does not.
	publicURLFromListener bool
}

// variables are the names config reads.
var variables = []string{
	"DATABASE_URL", "QUITTANCE_MIGRATION_DATABASE_URL", "QUITTANCE_READ_DATABASE_URL", "QUITTANCE_CHECKPOINT_INTERVAL", "QUITTANCE_CHECKPOINTS",
	"QUITTANCE_ORG_JWKS_REFRESH", "QUITTANCE_ORG_JWKS_UNKNOWN_KID_INTERVAL", "QUITTANCE_EVIDENCE_REFUSAL_TIME", "QUITTANCE_ADDR", "QUITTANCE_DATA_DIR", "QUITTANCE_LEDGER_ID", "QUITTANCE_BOOTSTRAP_TOKEN",
	"QUITTANCE_PUBLIC_URL", "QUITTANCE_SWEEP_INTERVAL", "QUITTANCE_WRITE_OFF_APPROVAL_THRESHOLD_MINOR", "QUITTANCE_WRITE_OFF_APPROVAL_THRESHOLDS_MINOR",
	"QUITTANCE_PERSON_CREDENTIAL_MAX_TTL",
	"QUITTANCE_EGRESS_ALLOW_CIDRS", "QUITTANCE_POLL_AFTER", "QUITTANCE_LOG_LEVEL", "QUITTANCE_SHUTDOWN_TIMEOUT",
	"QUITTANCE_RATE_LIMIT_RPS", "QUITTANCE_RATE_LIMIT_BURST", "QUITTANCE_RATE_LIMIT_MAX_BUCKETS",
	"QUITTANCE_EGRESS_ALLOW_HTTP", "QUITTANCE_A2A_INTERVAL", "QUITTANCE_A2A_LEASE", "QUITTANCE_A2A_BACKOFF_BASE",
	"QUITTANCE_A2A_BACKOFF_MAX", "QUITTANCE_COMPENSATION_MAX_ATTEMPTS", "QUITTANCE_A2A_STREAMING",
	"QUITTANCE_SIGNING_KEY_FILE", "QUITTANCE_WEBHOOK_MAX_ATTEMPTS", "QUITTANCE_WEBHOOK_BACKOFF_BASE",
	"QUITTANCE_WEBHOOK_BACKOFF_MAX", "QUITTANCE_STREAM_HEARTBEAT", "QUITTANCE_STREAM_POLL", "QUITTANCE_STREAM_MAX_PER_PRINCIPAL", "QUITTANCE_STREAM_MAX_OPEN", "QUITTANCE_DEBUG_ADDR", "QUITTANCE_METRICS_ADDR",
	"QUITTANCE_CONSOLE_SESSION_TTL", "QUITTANCE_OIDC_ISSUER_URL", "QUITTANCE_OIDC_CLIENT_ID", "QUITTANCE_OIDC_CLIENT_SECRET",
	"QUITTANCE_OIDC_REDIRECT_URL", "QUITTANCE_OIDC_ROLE_CLAIM", "QUITTANCE_OIDC_ROLE_MAP",
	"QUITTANCE_UNCONFIRMED_ALERT_GRACE",
	"QUITTANCE_TRUSTED_PROXY_HEADER", "QUITTANCE_PERSON_CREDENTIAL_TTL", "QUITTANCE_PENDING_CHANGE_TTL",
	"QUITTANCE_WRITE_BATCH_MAX", "QUITTANCE_WRITE_FLUSHERS", "QUITTANCE_WRITE_QUEUE_MAX",
}

// secretVariables may instead be given as NAME_FILE, the path of a file
// holding the value (how Kubernetes and systemd credentials mount secrets).
var secretVariables = map[string]bool{"DATABASE_URL": true, "QUITTANCE_MIGRATION_DATABASE_URL": true, "QUITTANCE_READ_DATABASE_URL": true, "QUITTANCE_BOOTSTRAP_TOKEN": true, "QUITTANCE_OIDC_CLIENT_SECRET": true}

// loadConfig reads the configuration through getenv.
func loadConfig(getenv func(string) string) (config, error) {
	environ := map[string]string{}
	for _, name := range variables {
		v := getenv(name)
		if path := getenv(name + "_FILE"); v == "" && path != "" && secretVariables[name] {
			b, err := os.ReadFile(path)
			if err != nil {
				return config{}, usageError{fmt.Errorf("read %s_FILE: %w", name, err)}
			}
			v = strings.TrimSpace(string(b))
		}
		if v != "" {
			environ[name] = v
		}
	}
	var cfg config
	if err := env.ParseWithOptions(&cfg, env.Options{Environment: environ}); err != nil {
		return config{}, usageError{fmt.Errorf("configuration: %w", err)}
	}
	if _, err := cfg.readPoolConfig(); err != nil {
		return config{}, usageError{fmt.Errorf("configuration: %w", err)}
	}
	if cfg.CheckpointInterval <= 0 {
		return config{}, usageError{fmt.Errorf("configuration: QUITTANCE_CHECKPOINT_INTERVAL must be positive")}
	}
	if cfg.Checkpoints != "on" && cfg.Checkpoints != "off" {
		return config{}, usageError{fmt.Errorf("configuration: QUITTANCE_CHECKPOINTS must be on or off, not %q", cfg.Checkpoints)}
	}
	if cfg.OrgJWKSRefresh <= 0 || cfg.OrgJWKSUnknownKidInterval <= 0 {
		return config{}, usageError{fmt.Errorf("configuration: QUITTANCE_ORG_JWKS_REFRESH and QUITTANCE_ORG_JWKS_UNKNOWN_KID_INTERVAL must be positive")}
	}
	if cfg.EvidenceRefusalTime < 0 {
		return config{}, usageError{fmt.Errorf("configuration: QUITTANCE_EVIDENCE_REFUSAL_TIME must not be negative")}
	}
	if cfg.SweepInterval <= 0 {
		return config{}, usageError{fmt.Errorf("configuration: QUITTANCE_SWEEP_INTERVAL must be positive")}
	}
	if cfg.RateLimitRPS < 0 || cfg.RateLimitBurst < 0 || cfg.RateLimitMaxBuckets < 0 {
		return config{}, usageError{fmt.Errorf("configuration: QUITTANCE_RATE_LIMIT_RPS, QUITTANCE_RATE_LIMIT_BURST and QUITTANCE_RATE_LIMIT_MAX_BUCKETS must not be negative")}
	}
	if cfg.A2AInterval <= 0 || cfg.A2ALease <= 0 || cfg.A2ABackoffBase <= 0 || cfg.A2ABackoffMax < cfg.A2ABackoffBase || cfg.PollAfter <= 0 {
		return config{}, usageError{fmt.Errorf("configuration: QUITTANCE_A2A_INTERVAL, QUITTANCE_A2A_LEASE, QUITTANCE_A2A_BACKOFF_BASE and QUITTANCE_POLL_AFTER must be positive, and QUITTANCE_A2A_BACKOFF_MAX at least the base")}
	}
	if cfg.WebhookMaxAttempts < 1 || cfg.WebhookBackoffBase <= 0 || cfg.WebhookBackoffMax < cfg.WebhookBackoffBase || cfg.StreamHeartbeat <= 0 || cfg.StreamPoll <= 0 {
		return config{}, usageError{fmt.Errorf("configuration: QUITTANCE_WEBHOOK_MAX_ATTEMPTS must be at least 1, QUITTANCE_WEBHOOK_BACKOFF_BASE, QUITTANCE_STREAM_HEARTBEAT and QUITTANCE_STREAM_POLL positive, and QUITTANCE_WEBHOOK_BACKOFF_MAX at least the base")}
	}
	if cfg.StreamMaxPerPrincipal < 1 || cfg.StreamMaxOpen < cfg.StreamMaxPerPrincipal {
		return config{}, usageError{fmt.Errorf("configuration: QUITTANCE_STREAM_MAX_PER_PRINCIPAL must be at least 1, and QUITTANCE_STREAM_MAX_OPEN at least that")}
	}
	if cfg.PersonCredentialTTL <= 0 || cfg.PendingChangeTTL <= 0 {
		return config{}, usageError{fmt.Errorf("configuration: QUITTANCE_PERSON_CREDENTIAL_TTL and QUITTANCE_PENDING_CHANGE_TTL must be positive")}
	}
	if cfg.PersonCredentialMaxTTL < cfg.PersonCredentialTTL {
		return config{}, usageError{fmt.Errorf("configuration: QUITTANCE_PERSON_CREDENTIAL_MAX_TTL must be at least QUITTANCE_PERSON_CREDENTIAL_TTL")}
	}
	if cfg.WriteBatchMax < 1 || cfg.WriteFlushers < 1 || cfg.WriteQueueMax < 1 {
		return config{}, usageError{fmt.Errorf("configuration: QUITTANCE_WRITE_BATCH_MAX, QUITTANCE_WRITE_FLUSHERS and QUITTANCE_WRITE_QUEUE_MAX must be at least 1")}
	}
	if cfg.CompensationMaxAttempts < 1 {
		return config{}, usageError{fmt.Errorf("configuration: QUITTANCE_COMPENSATION_MAX_ATTEMPTS must be at least 1")}
	}
	if _, err := egress.ParseAllowCIDRs(cfg.EgressAllowCIDRs); err != nil {
		return config{}, usageError{fmt.Errorf("configuration: QUITTANCE_EGRESS_ALLOW_CIDRS: %w", err)}
	}
	if cfg.UnconfirmedAlertGrace < 0 {
		return config{}, usageError{fmt.Errorf("configuration: QUITTANCE_UNCONFIRMED_ALERT_GRACE must not be negative")}
	}
	if err := cfg.checkConsole(); err != nil {
		return config{}, usageError{fmt.Errorf("configuration: %w", err)}
	}
	if cfg.WriteOffApprovalThresholdMinor < 0 {
		return config{}, usageError{fmt.Errorf("configuration: QUITTANCE_WRITE_OFF_APPROVAL_THRESHOLD_MINOR must not be negative")}
	}
	if _, err := cfg.currencyThresholds(); err != nil {
		return config{}, usageError{fmt.Errorf("configuration: QUITTANCE_WRITE_OFF_APPROVAL_THRESHOLDS_MINOR: %w", err)}
	}
	return cfg, nil
}

// currencyThresholds parses QUITTANCE_WRITE_OFF_APPROVAL_THRESHOLDS_MINOR:
// comma-separated CODE=MINOR entries, each currency once.
func (cfg config) currencyThresholds() (map[string]int64, error) {
	out := map[string]int64{}
	for entry := range strings.SplitSeq(cfg.WriteOffApprovalThresholdsMinor, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		code, minor, ok := strings.Cut(entry, "=")
		code = strings.TrimSpace(code)
		n, err := strconv.ParseInt(strings.TrimSpace(minor), 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("%q is not CODE=MINOR (for example JPY=10000000)", entry)
		}
		if _, dup := out[code]; dup {
			return nil, fmt.Errorf("%s is given twice", code)
		}
		out[code] = n
	}
	if err := ledger.CheckThresholdConfig(ledger.ThresholdConfig{Currencies: out}); err != nil {
		return nil, err
	}
	return out, nil
}

// egressPolicy is the outbound policy of the A2A client: https only unless
// QUITTANCE_EGRESS_ALLOW_HTTP, and special-purpose addresses only where
// QUITTANCE_EGRESS_ALLOW_CIDRS lists them.
func (c config) egressPolicy() egress.Policy {
	cidrs, _ := egress.ParseAllowCIDRs(c.EgressAllowCIDRs) // checked by loadConfig
	return egress.Policy{AllowHTTP: c.EgressAllowHTTP, AllowCIDRs: cidrs}
}
