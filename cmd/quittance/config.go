package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
)

// config is the service's configuration, read from the environment. Every
// variable is listed in the README's configuration table.
type config struct {
	DatabaseURL    string        `env:"DATABASE_URL"`
	Addr           string        `env:"QUITTANCE_ADDR" envDefault:"127.0.0.1:8080"`
	DataDir        string        `env:"QUITTANCE_DATA_DIR" envDefault:"./.quittance"`
	LedgerID       string        `env:"QUITTANCE_LEDGER_ID" envDefault:"quittance"`
	BootstrapToken string        `env:"QUITTANCE_BOOTSTRAP_TOKEN"`
	PublicURL      string        `env:"QUITTANCE_PUBLIC_URL"`
	SweepInterval  time.Duration `env:"QUITTANCE_SWEEP_INTERVAL" envDefault:"30s"`
	// WriteOffApprovalThresholdMinor is the amount above which a write-off
	// needs a second on-call approver.
	WriteOffApprovalThresholdMinor int64         `env:"QUITTANCE_WRITE_OFF_APPROVAL_THRESHOLD_MINOR" envDefault:"100000"`
	EgressAllowCIDRs               string        `env:"QUITTANCE_EGRESS_ALLOW_CIDRS"`
	PollAfter                      time.Duration `env:"QUITTANCE_POLL_AFTER" envDefault:"60s"`
	LogLevel                       slog.Level    `env:"QUITTANCE_LOG_LEVEL" envDefault:"info"`
	ShutdownTimeout                time.Duration `env:"QUITTANCE_SHUTDOWN_TIMEOUT" envDefault:"20s"`
}

// variables are the names config reads.
var variables = []string{
	"DATABASE_URL", "QUITTANCE_ADDR", "QUITTANCE_DATA_DIR", "QUITTANCE_LEDGER_ID", "QUITTANCE_BOOTSTRAP_TOKEN",
	"QUITTANCE_PUBLIC_URL", "QUITTANCE_SWEEP_INTERVAL", "QUITTANCE_WRITE_OFF_APPROVAL_THRESHOLD_MINOR",
	"QUITTANCE_EGRESS_ALLOW_CIDRS", "QUITTANCE_POLL_AFTER", "QUITTANCE_LOG_LEVEL", "QUITTANCE_SHUTDOWN_TIMEOUT",
}

// secretVariables may instead be given as NAME_FILE, the path of a file
// holding the value (how Kubernetes and systemd credentials mount secrets).
var secretVariables = map[string]bool{"DATABASE_URL": true, "QUITTANCE_BOOTSTRAP_TOKEN": true}

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
	if cfg.SweepInterval <= 0 {
		return config{}, usageError{fmt.Errorf("configuration: QUITTANCE_SWEEP_INTERVAL must be positive")}
	}
	if cfg.WriteOffApprovalThresholdMinor < 0 {
		return config{}, usageError{fmt.Errorf("configuration: QUITTANCE_WRITE_OFF_APPROVAL_THRESHOLD_MINOR must not be negative")}
	}
	return cfg, nil
}
