package promtest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func TestConfigYAML(t *testing.T) {
	out := configYAML(Config{Job: `odd "job"`, Targets: []string{"127.0.0.1:1234"}, RuleFiles: []string{"/a b/rules.yaml"}, Interval: 2 * time.Second})
	var cfg struct {
		Global struct {
			ScrapeInterval     string `yaml:"scrape_interval"`
			ScrapeTimeout      string `yaml:"scrape_timeout"`
			EvaluationInterval string `yaml:"evaluation_interval"`
		} `yaml:"global"`
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal([]byte(out), &cfg); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if cfg.Global.ScrapeInterval != "2s" || cfg.Global.ScrapeTimeout != "2s" || cfg.Global.EvaluationInterval != "2s" ||
		len(cfg.RuleFiles) != 1 || cfg.RuleFiles[0] != "/a b/rules.yaml" || len(cfg.ScrapeConfigs) != 1 ||
		cfg.ScrapeConfigs[0].JobName != `odd "job"` || strings.Join(cfg.ScrapeConfigs[0].StaticConfigs[0].Targets, ",") != "127.0.0.1:1234" {
		t.Errorf("config %+v from\n%s", cfg, out)
	}
}

func TestFindBinariesMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if _, err := FindBinaries(); !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), "apt-get install -y prometheus") {
		t.Errorf("FindBinaries without them: %v", err)
	}
}
