package dashboards

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// files holds the dashboards, the provisioning files and the alerting rules.
//
//go:embed grafana/*.json grafana/provisioning/*.yaml alerts/quittance.rules.yaml
var files embed.FS

// Paths of the embedded files, relative to this package's directory.
const (
	dashboardGlob  = "grafana/*.json"
	rulesPath      = "alerts/quittance.rules.yaml"
	datasourcePath = "grafana/provisioning/datasources.yaml"
)

// ReferencedMetrics returns every distinct metric name used in a PromQL expression of
// the embedded Grafana dashboards and Prometheus alerting rules, sorted. Histogram
// series (_bucket, _sum, _count) are reported under the histogram's base name; PromQL
// functions, aggregations, keywords, label names and Prometheus's own "up" are left out.
func ReferencedMetrics() ([]string, error) {
	exprs, err := expressions()
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, e := range exprs {
		for _, name := range metricNames(e) {
			seen[name] = true
		}
	}
	names := make([]string, 0, len(seen))
	for name := range seen {
		names = append(names, name)
	}
	slices.Sort(names)
	return names, nil
}

// Query is one PromQL query of a Grafana panel, as the dashboard file has it:
// Grafana's variables ($__rate_interval, $__range, $job) are not expanded.
type Query struct {
	// Dashboard is the dashboard's uid.
	Dashboard string
	// Panel is the panel's title.
	Panel string
	// RefID names the query within its panel.
	RefID string
	// Expr is the PromQL expression.
	Expr string
	// NoValue is what the panel shows when the query returns nothing
	// (fieldConfig.defaults.noValue); empty when it shows Grafana's "No data".
	NoValue string
}

// PanelQueries returns the queries of every panel of the embedded
// dashboards, rows' nested panels included, in file and panel order.
func PanelQueries() ([]Query, error) {
	names, err := fs.Glob(files, dashboardGlob)
	if err != nil {
		return nil, fmt.Errorf("list dashboards: %w", err)
	}
	type panel struct {
		Title       string `json:"title"`
		FieldConfig struct {
			Defaults struct {
				NoValue string `json:"noValue"`
			} `json:"defaults"`
		} `json:"fieldConfig"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var out []Query
	var walk func(uid string, raw []json.RawMessage) error
	walk = func(uid string, raw []json.RawMessage) error {
		for _, r := range raw {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				return err
			}
			for _, t := range p.Targets {
				out = append(out, Query{Dashboard: uid, Panel: p.Title, RefID: t.RefID, Expr: t.Expr, NoValue: p.FieldConfig.Defaults.NoValue})
			}
			if err := walk(uid, p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	for _, name := range names {
		b, err := files.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("read dashboard %s: %w", name, err)
		}
		var d struct {
			UID    string            `json:"uid"`
			Panels []json.RawMessage `json:"panels"`
		}
		if err := json.Unmarshal(b, &d); err != nil {
			return nil, fmt.Errorf("parse dashboard %s: %w", path.Base(name), err)
		}
		if err := walk(d.UID, d.Panels); err != nil {
			return nil, fmt.Errorf("parse dashboard %s: %w", path.Base(name), err)
		}
	}
	return out, nil
}

// expressions returns the PromQL expressions of every embedded dashboard and rule.
func expressions() ([]string, error) {
	var exprs []string
	dashboards, err := fs.Glob(files, dashboardGlob)
	if err != nil {
		return nil, fmt.Errorf("list dashboards: %w", err)
	}
	for _, name := range dashboards {
		b, err := files.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("read dashboard %s: %w", name, err)
		}
		var doc any
		if err := json.Unmarshal(b, &doc); err != nil {
			return nil, fmt.Errorf("parse dashboard %s: %w", path.Base(name), err)
		}
		exprs = collectExprs(doc, exprs)
	}

	b, err := files.ReadFile(rulesPath)
	if err != nil {
		return nil, fmt.Errorf("read rules: %w", err)
	}
	var rules ruleFile
	if err := yaml.Unmarshal(b, &rules); err != nil {
		return nil, fmt.Errorf("parse rules %s: %w", rulesPath, err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	return exprs, nil
}

// ruleFile is the part of a Prometheus rule file that holds expressions.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// collectExprs appends every string value stored under an "expr" key anywhere in a
// decoded Grafana dashboard: panel targets, nested row panels and library panels alike.
func collectExprs(v any, out []string) []string {
	switch v := v.(type) {
	case map[string]any:
		for k, child := range v {
			if s, ok := child.(string); ok && k == "expr" {
				out = append(out, s)
				continue
			}
			out = collectExprs(child, out)
		}
	case []any:
		for _, child := range v {
			out = collectExprs(child, out)
		}
	}
	return out
}

// groupingKeywords are followed by a parenthesised list of label names.
var groupingKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true,
	"group_left": true, "group_right": true,
}

// notMetrics are identifiers that are never metric names: keywords, aggregation
// operators (which may stand before "by (...)" instead of a parenthesis), constants,
// and the scrape-health series "up".
var notMetrics = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true,
	"inf": true, "nan": true, "start": true, "end": true,
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true,
	"stdvar": true, "count": true, "count_values": true, "bottomk": true, "topk": true,
	"quantile": true, "limitk": true, "limit_ratio": true,
	"up": true,
}

// histogramSuffixes are the series suffixes of a classic histogram (or summary).
var histogramSuffixes = []string{"_bucket", "_sum", "_count"}

// metricNames returns the metric names a PromQL expression selects, in order of
// appearance and possibly repeated. It is a tokenizer, not a parser: it skips string
// literals, label matchers ({...}), ranges and subqueries ([...]), comments, numbers and
// durations, Grafana variables ($name, ${name}), function calls and grouping clauses.
func metricNames(expr string) []string {
	var names []string
	i := 0
	for i < len(expr) {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			i = skipString(expr, i)
		case c == '{':
			i = skipBalanced(expr, i, '{', '}')
		case c == '[':
			i = skipBalanced(expr, i, '[', ']')
		case c == '#':
			for i < len(expr) && expr[i] != '\n' {
				i++
			}
		case c == '$':
			i++
			if i < len(expr) && expr[i] == '{' {
				i = skipBalanced(expr, i, '{', '}')
				break
			}
			for i < len(expr) && isIdentChar(expr[i]) {
				i++
			}
		case c >= '0' && c <= '9' || c == '.':
			for i < len(expr) && (isIdentChar(expr[i]) || expr[i] == '.') {
				i++
			}
		case isIdentStart(c):
			start := i
			for i < len(expr) && isIdentChar(expr[i]) {
				i++
			}
			word := expr[start:i]
			next := skipSpace(expr, i)
			followedByParen := next < len(expr) && expr[next] == '('
			switch {
			case groupingKeywords[strings.ToLower(word)]:
				if followedByParen {
					i = skipBalanced(expr, next, '(', ')')
				}
			case followedByParen, notMetrics[strings.ToLower(word)]:
				// A function call, an aggregation or a keyword.
			default:
				names = append(names, baseName(word))
			}
		default:
			i++
		}
	}
	return names
}

// baseName strips a histogram series suffix from a metric name.
func baseName(name string) string {
	for _, s := range histogramSuffixes {
		if base, ok := strings.CutSuffix(name, s); ok && base != "" {
			return base
		}
	}
	return name
}

// skipString returns the index just past the string literal that starts at i.
func skipString(s string, i int) int {
	quote := s[i]
	i++
	for i < len(s) {
		switch {
		case s[i] == '\\' && quote != '`':
			i += 2
		case s[i] == quote:
			return i + 1
		default:
			i++
		}
	}
	return i
}

// skipBalanced returns the index just past the closing bracket that matches the opening
// one at i, stepping over string literals and nested brackets of the same kind.
func skipBalanced(s string, i int, open, close byte) int {
	depth := 0
	for i < len(s) {
		switch c := s[i]; {
		case c == '"' || c == '\'' || c == '`':
			i = skipString(s, i)
			continue
		case c == open:
			depth++
		case c == close:
			depth--
			if depth == 0 {
				return i + 1
			}
		}
		i++
	}
	return i
}

// skipSpace returns the index of the first non-space byte at or after i.
func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// isIdentStart reports whether c can start a PromQL metric name or keyword.
func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// isIdentChar reports whether c can continue a PromQL metric name or keyword.
func isIdentChar(c byte) bool {
	return isIdentStart(c) || c >= '0' && c <= '9'
}
