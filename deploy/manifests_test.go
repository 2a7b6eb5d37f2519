package deploy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

const (
	manifestDir = "kubernetes"
	rulesFile   = "../dashboards/alerts/quittance.rules.yaml"
	postgresDir = "kubernetes/postgres" // the CloudNativePG standby, a kustomization of its own
	patroniDir  = "patroni"
)

// kustomization is the part of a kustomize Kustomization these manifests use; any other
// field fails the strict decode.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
}

// decodeStrict decodes one YAML document into out, failing on unknown fields, trailing
// documents, and an apiVersion or kind other than the ones given.
func decodeStrict(t *testing.T, path, apiVersion, kind string, out any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if docs := strings.Split("\n"+string(raw), "\n---"); len(docs) > 1 {
		t.Fatalf("%s: holds %d YAML documents, want 1", path, len(docs))
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(js, &meta); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if apiVersion != "" && (meta.APIVersion != apiVersion || meta.Kind != kind) {
		t.Fatalf("%s: %s %s, want %s %s", path, meta.APIVersion, meta.Kind, apiVersion, kind)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		t.Fatalf("%s: strict decode into %T: %v", path, out, err)
	}
	if dec.More() {
		t.Fatalf("%s: trailing data after the document", path)
	}
	// encoding/json matches field names case-insensitively, so DisallowUnknownFields
	// lets "readOnlyRootFileSystem" through. Re-encode the typed value and require every
	// key of the input to come back spelt exactly the same.
	var in, back any
	if err := json.Unmarshal(js, &in); err != nil {
		t.Fatal(err)
	}
	again, err := json.Marshal(out)
	if err != nil {
		t.Fatalf("%s: re-encode: %v", path, err)
	}
	if err := json.Unmarshal(again, &back); err != nil {
		t.Fatal(err)
	}
	for _, p := range lostKeys(in, back, "") {
		t.Errorf("%s: field %s is not a field of %T (misspelt or wrong case?)", path, p, out)
	}
}

// lostKeys returns the key paths of in that do not come back exactly in out, the same
// document decoded into its typed struct and encoded again. A key may only be missing
// when its value is empty (omitted on encoding) and no key differing only in case took
// its place.
func lostKeys(in, out any, at string) []string {
	var lost []string
	switch in := in.(type) {
	case map[string]any:
		outMap, _ := out.(map[string]any)
		for k, v := range in {
			p := at + "." + k
			if ov, ok := outMap[k]; ok {
				lost = append(lost, lostKeys(v, ov, p)...)
				continue
			}
			caseTwin := false
			for ok := range outMap {
				if strings.EqualFold(ok, k) {
					caseTwin = true
				}
			}
			if caseTwin || !isEmpty(v) {
				lost = append(lost, p)
			}
		}
	case []any:
		outList, _ := out.([]any)
		for i, v := range in {
			var ov any
			if i < len(outList) {
				ov = outList[i]
			}
			lost = append(lost, lostKeys(v, ov, fmt.Sprintf("%s[%d]", at, i))...)
		}
	}
	return lost
}

// isEmpty reports whether a decoded JSON value is one that omitempty leaves out.
func isEmpty(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case bool:
		return !v
	case float64:
		return v == 0
	case string:
		return v == ""
	case []any:
		return len(v) == 0
	case map[string]any:
		return len(v) == 0
	}
	return false
}

func manifest(name string) string { return filepath.Join(manifestDir, name) }

// wantLabels are the labels that tie the server's Deployment, Service, PDB and
// PodMonitor together.
var wantLabels = map[string]string{
	"app.kubernetes.io/name":      "quittance",
	"app.kubernetes.io/component": "server",
}

func TestKustomizationListsEveryManifest(t *testing.T) {
	var k kustomization
	decodeStrict(t, manifest("kustomization.yaml"), "kustomize.config.k8s.io/v1beta1", "Kustomization", &k)

	entries, err := os.ReadDir(manifestDir)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || filepath.Ext(name) != ".yaml" || name == "kustomization.yaml" || strings.HasSuffix(name, ".example.yaml") {
			continue
		}
		want = append(want, name)
	}
	got := slices.Clone(k.Resources)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("kustomization resources = %v, want every manifest %v", got, want)
	}
	if slices.ContainsFunc(k.Resources, func(r string) bool { return strings.Contains(r, "secret") }) {
		t.Errorf("kustomization must not list a Secret: %v", k.Resources)
	}
	for _, want := range []string{"deployment.yaml", "service.yaml", "pdb.yaml", "migrate-job.yaml", "podmonitor.yaml", "prometheusrule.yaml"} {
		if !slices.Contains(k.Resources, want) {
			t.Errorf("kustomization does not list %s", want)
		}
	}
}

// checkHardened asserts the pod and container security settings both workloads share.
func checkHardened(t *testing.T, what string, spec corev1.PodSpec) {
	t.Helper()
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Errorf("%s: pod securityContext.runAsNonRoot must be true", what)
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: pod seccompProfile must be RuntimeDefault", what)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("%s: automountServiceAccountToken must be false", what)
	}
	for _, c := range spec.Containers {
		sc := c.SecurityContext
		if sc == nil {
			t.Errorf("%s/%s: no securityContext", what, c.Name)
			continue
		}
		if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			t.Errorf("%s/%s: runAsNonRoot must be true", what, c.Name)
		}
		// The distroless image names its user "nonroot"; the kubelet can only verify a
		// numeric uid, so it must be set here.
		if sc.RunAsUser == nil || *sc.RunAsUser == 0 {
			t.Errorf("%s/%s: runAsUser must be a non-zero uid", what, c.Name)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s/%s: readOnlyRootFilesystem must be true", what, c.Name)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s/%s: allowPrivilegeEscalation must be false", what, c.Name)
		}
		if sc.Privileged != nil && *sc.Privileged {
			t.Errorf("%s/%s: must not be privileged", what, c.Name)
		}
		if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
			t.Errorf("%s/%s: capabilities must drop ALL and add none", what, c.Name)
		}
		if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s/%s: seccompProfile must be RuntimeDefault", what, c.Name)
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s/%s: needs cpu and memory requests and a memory limit", what, c.Name)
		}
		if c.Image == "" {
			t.Errorf("%s/%s: no image", what, c.Name)
		}
	}
}

// envVar returns the container's environment variable with the given name.
func envVar(c corev1.Container, name string) (corev1.EnvVar, bool) {
	i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
	if i < 0 {
		return corev1.EnvVar{}, false
	}
	return c.Env[i], true
}

// checkDatabaseURLFromSecret asserts DATABASE_URL comes from a required Secret key.
func checkDatabaseURLFromSecret(t *testing.T, what string, c corev1.Container) {
	t.Helper()
	checkURLFromSecret(t, what, c, "DATABASE_URL")
}

// checkURLFromSecret asserts the variable name comes from a required Secret key.
func checkURLFromSecret(t *testing.T, what string, c corev1.Container, name string) {
	t.Helper()
	e, ok := envVar(c, name)
	if !ok || e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
		t.Errorf("%s: %s must come from a Secret, got %+v", what, name, e)
		return
	}
	ref := e.ValueFrom.SecretKeyRef
	if ref.Name == "" || ref.Key == "" || (ref.Optional != nil && *ref.Optional) {
		t.Errorf("%s: %s secretKeyRef %+v must name a required key", what, name, ref)
	}
}

// checkHTTPProbe asserts a probe is an HTTP GET of path on the http port.
func checkHTTPProbe(t *testing.T, what string, p *corev1.Probe, path string, port corev1.ContainerPort) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Errorf("%s: want an httpGet probe on %s", what, path)
		return
	}
	if p.HTTPGet.Path != path {
		t.Errorf("%s: path %q, want %q", what, p.HTTPGet.Path, path)
	}
	switch pp := p.HTTPGet.Port; {
	case pp.Type == intstr.String && pp.StrVal == port.Name:
	case pp.Type == intstr.Int && pp.IntVal == port.ContainerPort:
	default:
		t.Errorf("%s: port %s, want %s (%d)", what, pp.String(), port.Name, port.ContainerPort)
	}
}

func loadDeployment(t *testing.T) appsv1.Deployment {
	var d appsv1.Deployment
	decodeStrict(t, manifest("deployment.yaml"), "apps/v1", "Deployment", &d)
	return d
}

func loadService(t *testing.T) corev1.Service {
	var s corev1.Service
	decodeStrict(t, manifest("service.yaml"), "v1", "Service", &s)
	return s
}

func TestDeployment(t *testing.T) {
	d := loadDeployment(t)
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas = %v, want 2", d.Spec.Replicas)
	}
	sel, err := metav1LabelSelector(d.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("selector %v does not match the pod template labels %v", sel, d.Spec.Template.Labels)
	}
	for k, v := range wantLabels {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("pod label %s = %q, want %q", k, d.Spec.Template.Labels[k], v)
		}
	}
	ru := d.Spec.Strategy.RollingUpdate
	if ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
		t.Errorf("rolling update must keep every replica available (maxUnavailable 0), got %+v", ru)
	}

	spec := d.Spec.Template.Spec
	checkHardened(t, "deployment", spec)
	if g := spec.TerminationGracePeriodSeconds; g == nil || *g < 10 {
		t.Errorf("terminationGracePeriodSeconds = %v, want at least 10", g)
	}
	if len(spec.TopologySpreadConstraints) == 0 {
		t.Error("no topologySpreadConstraints")
	}
	for _, c := range spec.TopologySpreadConstraints {
		cs, err := metav1LabelSelector(c.LabelSelector)
		if err != nil || !cs.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("topology spread on %s does not select the pods (%v)", c.TopologyKey, err)
		}
	}

	if len(spec.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(spec.Containers))
	}
	c := spec.Containers[0]
	if !slices.Equal(c.Args, []string{"serve"}) || len(c.Command) != 0 {
		t.Errorf("container runs command %v args %v, want the image entrypoint with args [serve]", c.Command, c.Args)
	}
	// The API on http, /metrics apart on metrics: metrics name the orgs whose
	// tokens were refused and why, which the public endpoints keep to themselves.
	if len(c.Ports) != 2 || c.Ports[0].Name != "http" || c.Ports[0].ContainerPort != 8080 ||
		c.Ports[1].Name != "metrics" || c.Ports[1].ContainerPort != 9464 {
		t.Fatalf("ports = %+v, want http 8080 and metrics 9464", c.Ports)
	}
	port := c.Ports[0]
	if e, _ := envVar(c, "QUITTANCE_ADDR"); e.Value != "0.0.0.0:8080" {
		t.Errorf("QUITTANCE_ADDR = %q, want 0.0.0.0:8080", e.Value)
	}
	if e, _ := envVar(c, "QUITTANCE_METRICS_ADDR"); e.Value != "0.0.0.0:9464" {
		t.Errorf("QUITTANCE_METRICS_ADDR = %q, want 0.0.0.0:9464 (the metrics port): unset, /metrics is served on the API's port", e.Value)
	}
	checkDatabaseURLFromSecret(t, "deployment", c)
	if e, ok := envVar(c, "QUITTANCE_BOOTSTRAP_TOKEN"); ok && e.Value != "" {
		t.Error("QUITTANCE_BOOTSTRAP_TOKEN must come from a Secret, not a literal")
	}
	checkHTTPProbe(t, "readinessProbe", c.ReadinessProbe, "/readyz", port)
	checkHTTPProbe(t, "livenessProbe", c.LivenessProbe, "/healthz", port)
	checkHTTPProbe(t, "startupProbe", c.StartupProbe, "/healthz", port)
	if p := c.StartupProbe; p != nil && p.PeriodSeconds*p.FailureThreshold < 60 {
		t.Errorf("startupProbe allows %ds, want at least 60s for start-up migrations", p.PeriodSeconds*p.FailureThreshold)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/tmp" }) {
		t.Error("read-only root filesystem needs a writable /tmp")
	}
	checkSigningKeyFromSecret(t, spec, c)
}

// checkSigningKeyFromSecret asserts QUITTANCE_SIGNING_KEY_FILE names a file
// of a read-only Secret volume, from the Secret's required signing-key:
// without it serve does not start, and the ledger would sign no
// checkpoints (ledger/AUDIT.md).
func checkSigningKeyFromSecret(t *testing.T, spec corev1.PodSpec, c corev1.Container) {
	t.Helper()
	if e, ok := envVar(c, "QUITTANCE_CHECKPOINTS"); ok {
		t.Errorf("QUITTANCE_CHECKPOINTS is set (%q): production signs checkpoints", e.Value)
	}
	e, ok := envVar(c, "QUITTANCE_SIGNING_KEY_FILE")
	if !ok || !filepath.IsAbs(e.Value) {
		t.Fatalf("QUITTANCE_SIGNING_KEY_FILE = %+v, want the absolute path of the mounted key", e)
	}
	i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return strings.HasPrefix(e.Value, strings.TrimSuffix(m.MountPath, "/")+"/")
	})
	if i < 0 {
		t.Fatalf("no volume is mounted where QUITTANCE_SIGNING_KEY_FILE (%s) points", e.Value)
	}
	m := c.VolumeMounts[i]
	if !m.ReadOnly {
		t.Errorf("the signing key's volume %s must be mounted read-only", m.Name)
	}
	j := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
	if j < 0 || spec.Volumes[j].Secret == nil {
		t.Fatalf("the signing key's volume %s must be a Secret volume", m.Name)
	}
	sv := spec.Volumes[j].Secret
	if sv.SecretName != "quittance" || (sv.Optional != nil && *sv.Optional) {
		t.Errorf("the signing key's Secret volume %+v must be the required Secret quittance", sv)
	}
	if sv.DefaultMode == nil || *sv.DefaultMode&0o007 != 0 {
		mode := "unset"
		if sv.DefaultMode != nil {
			mode = fmt.Sprintf("%#o", *sv.DefaultMode)
		}
		t.Errorf("the signing key's defaultMode %s must give others no access", mode)
	}
	rel := strings.TrimPrefix(e.Value, strings.TrimSuffix(m.MountPath, "/")+"/")
	if !slices.ContainsFunc(sv.Items, func(k corev1.KeyToPath) bool { return k.Key == "signing-key" && k.Path == rel }) {
		t.Errorf("the Secret volume's items %+v do not put key signing-key at %s", sv.Items, rel)
	}
}

// loadUnit returns the systemd unit's text and its [Service] settings (key →
// values, comments skipped).
func loadUnit(t *testing.T) (raw []byte, settings map[string][]string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("systemd", "quittance.service"))
	if err != nil {
		t.Fatal(err)
	}
	settings = map[string][]string{}
	section := ""
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = line
		case section == "[Service]":
			k, v, _ := strings.Cut(line, "=")
			settings[k] = append(settings[k], v)
		}
	}
	return raw, settings
}

// TestSystemdUnitServesMetricsApart: the unit serves /metrics on a loopback
// address of its own, not on the API's.
func TestSystemdUnitServesMetricsApart(t *testing.T) {
	_, settings := loadUnit(t)
	env := map[string]string{}
	for _, v := range settings["Environment"] {
		k, val, _ := strings.Cut(v, "=")
		env[k] = val
	}
	metrics := env["QUITTANCE_METRICS_ADDR"]
	host, _, err := net.SplitHostPort(metrics)
	if err != nil || metrics == env["QUITTANCE_ADDR"] {
		t.Fatalf("QUITTANCE_METRICS_ADDR = %q (QUITTANCE_ADDR %q): want an address of its own", metrics, env["QUITTANCE_ADDR"])
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		t.Errorf("QUITTANCE_METRICS_ADDR = %q: want a loopback address, reachable from this host only", metrics)
	}
}

// TestDockerfileServesMetricsApart: the image serves /metrics on a port of
// its own, so publishing the API's port does not publish metrics.
func TestDockerfileServesMetricsApart(t *testing.T) {
	raw, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(raw), "\n")
	if !slices.Contains(lines, "ENV QUITTANCE_ADDR=0.0.0.0:8080") || !slices.Contains(lines, "ENV QUITTANCE_METRICS_ADDR=0.0.0.0:9464") {
		t.Errorf("the Dockerfile does not set QUITTANCE_ADDR=0.0.0.0:8080 and QUITTANCE_METRICS_ADDR=0.0.0.0:9464")
	}
}

// TestSystemdUnitHasTheSigningKey: the systemd unit hands the service the
// ledger's signing key as a credential and names it in
// QUITTANCE_SIGNING_KEY_FILE, and does not turn checkpoints off.
func TestSystemdUnitHasTheSigningKey(t *testing.T) {
	raw, settings := loadUnit(t)
	var credential string
	for _, v := range settings["LoadCredential"] {
		if id, path, ok := strings.Cut(v, ":"); ok && id == "signing-key" {
			credential = path
		}
	}
	if !filepath.IsAbs(credential) {
		t.Errorf("LoadCredential=%v: want signing-key:<absolute path of the key>", settings["LoadCredential"])
	}
	if !slices.Contains(settings["Environment"], "QUITTANCE_SIGNING_KEY_FILE=%d/signing-key") {
		t.Errorf("Environment=%v: want QUITTANCE_SIGNING_KEY_FILE=%%d/signing-key (the credential)", settings["Environment"])
	}
	for _, v := range settings["Environment"] {
		if strings.HasPrefix(v, "QUITTANCE_CHECKPOINTS=") {
			t.Errorf("the unit sets %s: production signs checkpoints", v)
		}
	}
	if !strings.Contains(string(raw), "openssl genpkey -algorithm ed25519 -out "+credential) {
		t.Errorf("the unit's comment does not say how to create %s", credential)
	}
}

func TestService(t *testing.T) {
	d := loadDeployment(t)
	s := loadService(t)
	if len(s.Spec.Selector) == 0 || !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("service selector %v does not select the deployment's pods %v", s.Spec.Selector, d.Spec.Template.Labels)
	}
	// One port, the API's: /metrics is scraped from the pods' metrics port,
	// which no Service exposes.
	if len(s.Spec.Ports) != 1 {
		t.Fatalf("ports = %+v, want one (the API's; not the metrics port)", s.Spec.Ports)
	}
	p := s.Spec.Ports[0]
	if p.Name != "http" || p.Port != 8080 || p.TargetPort.String() != "http" {
		t.Errorf("port = %+v, want http 8080 -> http", p)
	}
	for k, v := range wantLabels {
		if s.Labels[k] != v {
			t.Errorf("service label %s = %q, want %q", k, s.Labels[k], v)
		}
	}
	// A naming convention shared with the other manifests, nothing more: the
	// rules recognise Quittance targets by quittance_collector_up whatever
	// the scrape job (the Service's name) is called.
	if s.Name != "quittance" {
		t.Errorf("service name %q, want quittance like the other manifests (a convention only: the rules recognise Quittance targets by quittance_collector_up, whatever the job is called)", s.Name)
	}
}

func TestPodDisruptionBudget(t *testing.T) {
	d := loadDeployment(t)
	var pdb policyv1.PodDisruptionBudget
	decodeStrict(t, manifest("pdb.yaml"), "policy/v1", "PodDisruptionBudget", &pdb)
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.String() != "1" || pdb.Spec.MaxUnavailable != nil {
		t.Errorf("minAvailable = %v, maxUnavailable = %v; want minAvailable 1 only", pdb.Spec.MinAvailable, pdb.Spec.MaxUnavailable)
	}
	sel, err := metav1LabelSelector(pdb.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("PDB selector does not select the deployment's pods (%v)", err)
	}
}

func TestMigrateJob(t *testing.T) {
	d := loadDeployment(t)
	var j batchv1.Job
	decodeStrict(t, manifest("migrate-job.yaml"), "batch/v1", "Job", &j)
	spec := j.Spec.Template.Spec
	checkHardened(t, "migrate job", spec)
	if spec.RestartPolicy != corev1.RestartPolicyNever && spec.RestartPolicy != corev1.RestartPolicyOnFailure {
		t.Errorf("restartPolicy = %q", spec.RestartPolicy)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(spec.Containers))
	}
	c := spec.Containers[0]
	if !slices.Equal(c.Args, []string{"migrate"}) || len(c.Command) != 0 {
		t.Errorf("job runs command %v args %v, want args [migrate]", c.Command, c.Args)
	}
	if c.Image != d.Spec.Template.Spec.Containers[0].Image {
		t.Errorf("job image %q differs from the deployment's %q", c.Image, d.Spec.Template.Spec.Containers[0].Image)
	}
	// The Job migrates as the owner of the schema; the replicas connect as the
	// service's own role and never hold the owner's credentials.
	checkURLFromSecret(t, "migrate job", c, "QUITTANCE_MIGRATION_DATABASE_URL")
	if _, ok := envVar(c, "DATABASE_URL"); ok {
		t.Error("the migrate job sets DATABASE_URL: it needs only the owner's QUITTANCE_MIGRATION_DATABASE_URL")
	}
	server := d.Spec.Template.Spec.Containers[0]
	if _, ok := envVar(server, "QUITTANCE_MIGRATION_DATABASE_URL"); ok {
		t.Error("the deployment holds the owner's QUITTANCE_MIGRATION_DATABASE_URL: the service must run as its own role")
	}
	jobEnv, _ := envVar(c, "QUITTANCE_MIGRATION_DATABASE_URL")
	if jobEnv.ValueFrom == nil || jobEnv.ValueFrom.SecretKeyRef == nil {
		return
	}
	jobRef := jobEnv.ValueFrom.SecretKeyRef
	for _, e := range server.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == jobRef.Name {
			t.Errorf("the deployment reads %s from the migration Secret %q", e.Name, jobRef.Name)
		}
	}
	var ms corev1.Secret
	decodeStrict(t, manifest("secret-migration.example.yaml"), "v1", "Secret", &ms)
	if ms.Name != jobRef.Name || ms.StringData[jobRef.Key] == "" {
		t.Errorf("the example migration Secret %q has no key %q the Job reads from %q", ms.Name, jobRef.Key, jobRef.Name)
	}
	// The migrate Job's pods must not be picked up by the Service, PDB or spread constraints.
	if labels.SelectorFromSet(loadService(t).Spec.Selector).Matches(labels.Set(j.Spec.Template.Labels)) {
		t.Error("the Service selects the migrate Job's pods")
	}
	if j.Spec.BackoffLimit == nil {
		t.Error("backoffLimit must be set")
	}
}

// TestPodMonitor: Prometheus scrapes /metrics on the pods' metrics port,
// which is not the port the Service exposes.
func TestPodMonitor(t *testing.T) {
	d := loadDeployment(t)
	s := loadService(t)
	var pm monitoringv1.PodMonitor
	decodeStrict(t, manifest("podmonitor.yaml"), "monitoring.coreos.com/v1", "PodMonitor", &pm)
	sel, err := metav1LabelSelector(&pm.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if sel.Empty() || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("PodMonitor selector %v does not select the deployment's pods %v", sel, d.Spec.Template.Labels)
	}
	if len(pm.Spec.PodMetricsEndpoints) != 1 {
		t.Fatalf("endpoints = %+v, want one", pm.Spec.PodMetricsEndpoints)
	}
	ep := pm.Spec.PodMetricsEndpoints[0]
	if ep.Port == nil || *ep.Port != "metrics" {
		t.Fatalf("endpoint port %v, want the container port metrics", ep.Port)
	}
	c := d.Spec.Template.Spec.Containers[0]
	i := slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == *ep.Port })
	if i < 0 {
		t.Fatalf("the container has no port %q", *ep.Port)
	}
	for _, sp := range s.Spec.Ports {
		if sp.TargetPort.String() == *ep.Port || sp.TargetPort.IntValue() == int(c.Ports[i].ContainerPort) || sp.Port == c.Ports[i].ContainerPort {
			t.Errorf("the Service's port %s reaches the metrics port", sp.Name)
		}
	}
	if e, _ := envVar(c, "QUITTANCE_METRICS_ADDR"); !strings.HasSuffix(e.Value, fmt.Sprintf(":%d", c.Ports[i].ContainerPort)) {
		t.Errorf("QUITTANCE_METRICS_ADDR = %q does not listen on the scraped port %d", e.Value, c.Ports[i].ContainerPort)
	}
	if ep.Path != "/metrics" {
		t.Errorf("endpoint path %q, want /metrics", ep.Path)
	}
}

func TestPrometheusRuleMatchesRulesFile(t *testing.T) {
	var pr monitoringv1.PrometheusRule
	decodeStrict(t, manifest("prometheusrule.yaml"), "monitoring.coreos.com/v1", "PrometheusRule", &pr)

	// The rules file has the same shape as a PrometheusRule's spec.
	var file monitoringv1.PrometheusRuleSpec
	decodeStrict(t, rulesFile, "", "", &file)

	if len(file.Groups) == 0 {
		t.Fatalf("%s has no rule groups", rulesFile)
	}
	if !reflect.DeepEqual(pr.Spec.Groups, file.Groups) {
		a, _ := json.MarshalIndent(pr.Spec.Groups, "", "  ")
		b, _ := json.MarshalIndent(file.Groups, "", "  ")
		t.Errorf("prometheusrule.yaml groups differ from %s:\n--- prometheusrule.yaml\n%s\n--- %s\n%s", rulesFile, a, rulesFile, b)
	}

	var alerts []string
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts = append(alerts, r.Alert)
			}
		}
	}
	for _, want := range []string{
		"QuittanceObligationUnconfirmed", "QuittanceEscalations", "QuittanceRefusedTokenSpike",
		"QuittanceCompensationRequestFailures", "QuittanceCollectorFailing", "QuittanceNoScrape",
		"QuittanceOutboxStuck", "QuittanceOutboxJobFailing", "QuittanceWebhookDeadLetters",
	} {
		if !slices.Contains(alerts, want) {
			t.Errorf("alert %s missing from the PrometheusRule", want)
		}
	}
}

func TestSecretExampleStaysOutOfKustomization(t *testing.T) {
	var s corev1.Secret
	decodeStrict(t, manifest("secret.example.yaml"), "v1", "Secret", &s)
	d := loadDeployment(t)
	c := d.Spec.Template.Spec.Containers[0]
	e, _ := envVar(c, "DATABASE_URL")
	if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
		t.Fatal("DATABASE_URL is not from a Secret")
	}
	ref := e.ValueFrom.SecretKeyRef
	if s.Name != ref.Name {
		t.Errorf("example Secret is named %q, the deployment reads %q", s.Name, ref.Name)
	}
	if _, ok := s.StringData[ref.Key]; !ok {
		t.Errorf("example Secret has no key %q", ref.Key)
	}
	if key := s.StringData["signing-key"]; !strings.Contains(key, "-----BEGIN PRIVATE KEY-----") {
		t.Errorf("example Secret's signing-key %q is not a PEM private key placeholder", key)
	}
}

// cnpgCluster is the part of a CloudNativePG Cluster these manifests use; any other
// field fails the strict decode.
type cnpgCluster struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels,omitempty"`
	} `json:"metadata"`
	Spec struct {
		Instances  int `json:"instances"`
		PostgreSQL struct {
			Parameters  map[string]string `json:"parameters,omitempty"`
			Synchronous *struct {
				Method         string `json:"method"`
				Number         int    `json:"number"`
				DataDurability string `json:"dataDurability,omitempty"`
			} `json:"synchronous,omitempty"`
		} `json:"postgresql"`
		Bootstrap struct {
			InitDB struct {
				Database string `json:"database"`
				Owner    string `json:"owner"`
			} `json:"initdb"`
		} `json:"bootstrap"`
		Storage struct {
			Size string `json:"size"`
		} `json:"storage"`
	} `json:"spec"`
}

// pgURL is a libpq/pgx connection URL: its hosts (several, comma-separated, for
// failover) and its query parameters.
type pgURL struct {
	hosts []string
	query url.Values
}

func parsePGURL(t *testing.T, what, raw string) pgURL {
	t.Helper()
	rest, ok := strings.CutPrefix(raw, "postgres://")
	if !ok {
		t.Fatalf("%s: %q is not a postgres:// URL", what, raw)
	}
	if _, after, ok := strings.Cut(rest, "@"); ok {
		rest = after
	}
	hostPart, after, _ := strings.Cut(rest, "/")
	_, rawQuery, _ := strings.Cut(after, "?")
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	var hosts []string
	for _, h := range strings.Split(hostPart, ",") {
		name, _, _ := strings.Cut(h, ":")
		hosts = append(hosts, name)
	}
	return pgURL{hosts: hosts, query: q}
}

func TestCloudNativePGCluster(t *testing.T) {
	var k kustomization
	decodeStrict(t, filepath.Join(postgresDir, "kustomization.yaml"), "kustomize.config.k8s.io/v1beta1", "Kustomization", &k)
	if !slices.Equal(k.Resources, []string{"cluster.yaml"}) {
		t.Errorf("postgres kustomization resources = %v, want [cluster.yaml] (the Secret stays out)", k.Resources)
	}

	var c cnpgCluster
	decodeStrict(t, filepath.Join(postgresDir, "cluster.yaml"), "postgresql.cnpg.io/v1", "Cluster", &c)
	if c.Spec.Instances != 2 {
		t.Errorf("instances = %d, want 2 (a primary and a standby)", c.Spec.Instances)
	}
	s := c.Spec.PostgreSQL.Synchronous
	if s == nil || (s.Method != "any" && s.Method != "first") || s.Number < 1 || s.Number >= c.Spec.Instances {
		t.Errorf("postgresql.synchronous = %+v, want method any or first with 1 <= number < instances", s)
	}
	if s != nil && s.DataDurability != "" && s.DataDurability != "required" {
		t.Errorf("synchronous.dataDurability = %q: preferred lets the primary acknowledge what a failover can lose", s.DataDurability)
	}
	if c.Spec.PostgreSQL.Parameters["hot_standby_feedback"] != "on" {
		t.Error("postgresql.parameters.hot_standby_feedback must be on: exports read from the standby are otherwise canceled by recovery conflicts")
	}
	if c.Spec.Bootstrap.InitDB.Database != "quittance" {
		t.Errorf("initdb database = %q, want quittance", c.Spec.Bootstrap.InitDB.Database)
	}

	// The example Secret points the service at the cluster's -rw and -ro Services,
	// under the names and keys the deployment reads.
	var sec corev1.Secret
	decodeStrict(t, filepath.Join(postgresDir, "secret.example.yaml"), "v1", "Secret", &sec)
	d := loadDeployment(t)
	ctr := d.Spec.Template.Spec.Containers[0]
	for name, want := range map[string]string{
		"DATABASE_URL":                c.Metadata.Name + "-rw",
		"QUITTANCE_READ_DATABASE_URL": c.Metadata.Name + "-ro",
	} {
		e, _ := envVar(ctr, name)
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			t.Errorf("the deployment's %s is not from a Secret", name)
			continue
		}
		ref := e.ValueFrom.SecretKeyRef
		if sec.Name != ref.Name || sec.StringData[ref.Key] == "" {
			t.Errorf("%s: the example Secret %q has no key %q the deployment reads from %q", name, sec.Name, ref.Key, ref.Name)
			continue
		}
		u := parsePGURL(t, name, sec.StringData[ref.Key])
		if !slices.Equal(u.hosts, []string{want}) {
			t.Errorf("%s hosts = %v, want [%s]", name, u.hosts, want)
		}
		if name == "DATABASE_URL" && u.query.Get("target_session_attrs") != "read-write" {
			t.Errorf("DATABASE_URL target_session_attrs = %q, want read-write", u.query.Get("target_session_attrs"))
		}
	}
}

// patroniConfig is the part of a Patroni configuration patroni.yml uses; any other
// field fails the strict decode.
type patroniConfig struct {
	Scope   string `json:"scope"`
	Name    string `json:"name"`
	RestAPI struct {
		Listen         string `json:"listen"`
		ConnectAddress string `json:"connect_address"`
	} `json:"restapi"`
	Etcd3 *struct {
		Hosts []string `json:"hosts"`
	} `json:"etcd3,omitempty"`
	Bootstrap struct {
		DCS struct {
			TTL                   int  `json:"ttl"`
			LoopWait              int  `json:"loop_wait"`
			RetryTimeout          int  `json:"retry_timeout"`
			SynchronousMode       bool `json:"synchronous_mode"`
			SynchronousModeStrict bool `json:"synchronous_mode_strict,omitempty"`
			PostgreSQL            struct {
				UsePGRewind bool              `json:"use_pg_rewind"`
				Parameters  map[string]string `json:"parameters"`
			} `json:"postgresql"`
		} `json:"dcs"`
		InitDB []any `json:"initdb"`
	} `json:"bootstrap"`
	PostgreSQL struct {
		Listen         string            `json:"listen"`
		ConnectAddress string            `json:"connect_address"`
		DataDir        string            `json:"data_dir"`
		PGPass         string            `json:"pgpass"`
		Parameters     map[string]string `json:"parameters"`
		Authentication struct {
			Superuser   patroniUser `json:"superuser"`
			Replication patroniUser `json:"replication"`
		} `json:"authentication"`
		PGHBA []string `json:"pg_hba"`
	} `json:"postgresql"`
}

type patroniUser struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

func TestPatroniConfig(t *testing.T) {
	var p patroniConfig
	decodeStrict(t, filepath.Join(patroniDir, "patroni.yml"), "", "", &p)
	if p.Etcd3 == nil || len(p.Etcd3.Hosts) == 0 {
		t.Error("patroni.yml has no etcd3 section with hosts")
	}
	dcs := p.Bootstrap.DCS
	if !dcs.SynchronousMode {
		t.Error("bootstrap.dcs.synchronous_mode must be true: an asynchronous failover loses acknowledged writes")
	}
	if v := dcs.PostgreSQL.Parameters["synchronous_commit"]; v != "" && v != "on" && v != "remote_apply" {
		t.Errorf("synchronous_commit = %q, want on or remote_apply", v)
	}
	if dcs.PostgreSQL.Parameters["hot_standby_feedback"] != "on" {
		t.Error("bootstrap.dcs.postgresql.parameters.hot_standby_feedback must be on: exports read from the standby are otherwise canceled by recovery conflicts")
	}
	if p.PostgreSQL.Parameters["ssl"] != "on" {
		t.Error("postgresql.parameters.ssl must be on: the service connects with sslmode=verify-full")
	}
	if p.Scope == "" || p.Name == "" || p.PostgreSQL.ConnectAddress == "" {
		t.Errorf("scope %q, name %q, postgresql.connect_address %q must be set", p.Scope, p.Name, p.PostgreSQL.ConnectAddress)
	}
	member, _, _ := strings.Cut(p.PostgreSQL.ConnectAddress, ":")

	raw, err := os.ReadFile(filepath.Join(patroniDir, "quittance.env.example"))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, _ := strings.Cut(line, "=")
		env[k] = v
	}
	for name, attrs := range map[string][]string{
		"DATABASE_URL":                {"read-write"},
		"QUITTANCE_READ_DATABASE_URL": {"standby", "prefer-standby"},
	} {
		v, ok := env[name]
		if !ok {
			t.Errorf("quittance.env.example does not set %s", name)
			continue
		}
		u := parsePGURL(t, name, v)
		if len(u.hosts) != 2 || !slices.Contains(u.hosts, member) {
			t.Errorf("%s hosts = %v, want both members, %s among them", name, u.hosts, member)
		}
		if got := u.query.Get("target_session_attrs"); !slices.Contains(attrs, got) {
			t.Errorf("%s target_session_attrs = %q, want one of %v", name, got, attrs)
		}
	}
}
