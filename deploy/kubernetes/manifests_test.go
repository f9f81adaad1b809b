// Package kubernetes_test decodes the manifests into the Kubernetes API
// types with strict field checking, so a typo or a field the API does not
// have fails here rather than at kubectl apply, and checks the security
// settings README.md documents. k8s.io/api is imported by this test only:
// the cudatrace binary does not link it.
package kubernetes_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// The capabilities README.md's table explains, in the manifest's order.
var documentedCaps = []corev1.Capability{"BPF", "PERFMON", "SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE", "DAC_READ_SEARCH", "SYSLOG"}

// decodeAll splits a multi-document YAML file and decodes each document
// into the API type its kind names; unknown fields and kinds fail.
func decodeAll(t *testing.T, path string) []any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []any
	for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("%s document %d: %v", path, i, err)
		}
		var obj any
		switch tm.APIVersion + " " + tm.Kind {
		case "v1 Namespace":
			obj = &corev1.Namespace{}
		case "v1 ServiceAccount":
			obj = &corev1.ServiceAccount{}
		case "v1 Service":
			obj = &corev1.Service{}
		case "apps/v1 DaemonSet":
			obj = &appsv1.DaemonSet{}
		default:
			t.Fatalf("%s document %d: unexpected %s %s", path, i, tm.APIVersion, tm.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("%s document %d (%s): %v", path, i, tm.Kind, err)
		}
		out = append(out, obj)
	}
	return out
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func only[T any](t *testing.T, objs []any) T {
	t.Helper()
	var found []T
	for _, o := range objs {
		if v, ok := o.(T); ok {
			found = append(found, v)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d objects of type %T, want 1", len(found), *new(T))
	}
	return found[0]
}

func TestDaemonSet(t *testing.T) {
	objs := decodeAll(t, "daemonset.yaml")
	ns := only[*corev1.Namespace](t, objs)
	sa := only[*corev1.ServiceAccount](t, objs)
	ds := only[*appsv1.DaemonSet](t, objs)
	svc := only[*corev1.Service](t, objs)
	for _, m := range []metav1.ObjectMeta{sa.ObjectMeta, ds.ObjectMeta, svc.ObjectMeta} {
		if m.Namespace != ns.Name {
			t.Errorf("%s is in namespace %q, not %q", m.Name, m.Namespace, ns.Name)
		}
	}
	pod := ds.Spec.Template.Spec
	if pod.ServiceAccountName != sa.Name {
		t.Errorf("serviceAccountName %q, want %q", pod.ServiceAccountName, sa.Name)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the pod mounts an API token it never uses")
	}
	if !pod.HostPID {
		t.Error("hostPID is not set: watch refuses a PID namespace of its own")
	}
	if pod.HostNetwork || pod.HostIPC {
		t.Error("hostNetwork or hostIPC set: watch needs neither")
	}
	if pod.TerminationGracePeriodSeconds == nil || *pod.TerminationGracePeriodSeconds < 10 {
		t.Errorf("terminationGracePeriodSeconds %v leaves SIGTERM's drain no time", pod.TerminationGracePeriodSeconds)
	}
	if !slices.ContainsFunc(pod.Tolerations, func(tol corev1.Toleration) bool {
		return tol.Key == "nvidia.com/gpu" && tol.Effect == corev1.TaintEffectNoSchedule &&
			(tol.Operator == corev1.TolerationOpExists || tol.Operator == "")
	}) {
		t.Errorf("no toleration for nvidia.com/gpu:NoSchedule: %+v", pod.Tolerations)
	}
	if pod.Affinity == nil || pod.Affinity.NodeAffinity == nil ||
		pod.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		t.Error("no node affinity for GPU nodes")
	}
	if !selects(ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels) {
		t.Errorf("selector %v does not select the template's labels %v", ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels)
	}

	if len(pod.Containers) != 1 || len(pod.InitContainers) != 0 {
		t.Fatalf("%d containers, %d init containers; want one watch container", len(pod.Containers), len(pod.InitContainers))
	}
	c := pod.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "watch" || flagValue(c.Args, "--format") != "json" {
		t.Errorf("args %q: want watch --format=json", c.Args)
	}
	checkImage(t, c.Image)

	// hostPID and the capabilities are refused under baseline: the
	// namespace enforces privileged, and says so for audit and warn too.
	for _, mode := range []string{"enforce", "audit", "warn"} {
		if v := ns.Labels["pod-security.kubernetes.io/"+mode]; v != "privileged" {
			t.Errorf("namespace label pod-security.kubernetes.io/%s=%q, want privileged", mode, v)
		}
	}

	sc := c.SecurityContext
	if sc == nil {
		t.Fatal("no securityContext")
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("privileged: true; the capabilities below are what it needs")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("the root filesystem is writable")
	}
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Error("not uid 0: Kubernetes gives added capabilities to root only")
	}
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation: false is refused by the API server with CAP_SYS_ADMIN")
	}
	if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("capabilities drop %v, want [ALL]", sc.Capabilities)
	} else if !slices.Equal(sc.Capabilities.Add, documentedCaps) {
		t.Errorf("capabilities add %v, want the documented %v", sc.Capabilities.Add, documentedCaps)
	}
	if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("seccomp %+v, want RuntimeDefault (bpf and perf_event_open are allowed with the capabilities)", sc.SeccompProfile)
	}
	if sc.AppArmorProfile == nil || sc.AppArmorProfile.Type != corev1.AppArmorProfileTypeUnconfined {
		t.Errorf("AppArmor %+v, want Unconfined (the default profile refuses other processes' /proc)", sc.AppArmorProfile)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, capName := range documentedCaps {
		if !regexp.MustCompile("(?m)^\\| `CAP_" + string(capName) + "` \\|").Match(readme) {
			t.Errorf("README.md's capability table has no row for CAP_%s", capName)
		}
	}
	if n := len(regexp.MustCompile("(?m)^\\| `CAP_[A-Z_]+` \\|").FindAll(readme, -1)); n != len(documentedCaps) {
		t.Errorf("README.md's table has %d capabilities, the manifest %d", n, len(documentedCaps))
	}

	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Limits[r]; !ok {
			t.Errorf("no %s limit", r)
		}
		if _, ok := c.Resources.Requests[r]; !ok {
			t.Errorf("no %s request", r)
		}
	}

	// Every host path is mounted read-only but the report directory, which
	// watch's --report-dir names.
	reportDir := flagValue(c.Args, "--report-dir")
	if reportDir == "" {
		t.Error("no --report-dir")
	}
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	reportMounted := false
	for _, m := range c.VolumeMounts {
		v, ok := vols[m.Name]
		if !ok {
			t.Errorf("mount %s names no volume", m.Name)
			continue
		}
		if v.HostPath == nil {
			continue
		}
		if m.MountPath == reportDir {
			reportMounted = true
			if m.ReadOnly {
				t.Errorf("the report directory %s is read-only", reportDir)
			}
			continue
		}
		if !m.ReadOnly {
			t.Errorf("host path %s is mounted writable at %s", v.HostPath.Path, m.MountPath)
		}
		if v.HostPath.Path == "/" || v.HostPath.Path == "/sys/fs/bpf" || strings.HasPrefix(v.HostPath.Path, "/var/run/") {
			t.Errorf("host path %s is not needed (nothing is pinned; /proc is the host's by hostPID)", v.HostPath.Path)
		}
	}
	if m := hostCgroupMount(pod); m == nil {
		t.Error("no read-only hostPath of /sys/fs/cgroup beside the container's own: other pods' device programs would need a mount of watch's own, and doctor makes none")
	}
	if reportDir != "" && !reportMounted {
		t.Errorf("--report-dir %s is not a mounted volume: it would be lost with the pod, or refused by the read-only root", reportDir)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/tmp" && !m.ReadOnly }) {
		t.Error("no writable /tmp under the read-only root")
	}

	// The metrics port: --metrics, the container port, the probe, the
	// scrape annotations and the Service all agree.
	addr := flagValue(c.Args, "--metrics")
	host, port, ok := strings.Cut(addr, ":")
	if !ok || port == "" {
		t.Fatalf("--metrics %q has no port", addr)
	}
	// One address, the pod's, from the downward API: ":PORT" binds all.
	if host != "$(POD_IP)" || !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "POD_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP"
	}) {
		t.Errorf("--metrics %q: bind the pod IP ($(POD_IP) from status.podIP), not every address", addr)
	}
	var metricsPort *corev1.ContainerPort
	for i := range c.Ports {
		if c.Ports[i].Name == "metrics" {
			metricsPort = &c.Ports[i]
		}
	}
	if metricsPort == nil || itoa(metricsPort.ContainerPort) != port {
		t.Errorf("containerPort metrics %+v does not match --metrics %s", metricsPort, addr)
	}
	if lp := c.LivenessProbe; lp == nil || lp.HTTPGet == nil || lp.HTTPGet.Path != "/metrics" || lp.HTTPGet.Port.String() != "metrics" {
		t.Errorf("liveness probe %+v, want GET /metrics on the metrics port", c.LivenessProbe)
	}
	// One scrape annotation, the pods': on the Service as well, each pod
	// would be scraped twice (pod and endpoints discovery).
	if ann := ds.Spec.Template.Annotations; ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != port {
		t.Errorf("pod annotations %v do not point Prometheus at port %s", ann, port)
	}
	for k := range svc.Annotations {
		if strings.HasPrefix(k, "prometheus.io/") {
			t.Errorf("the Service has %s too: pods would be scraped twice", k)
		}
	}
	if !selects(svc.Spec.Selector, ds.Spec.Template.Labels) {
		t.Errorf("the Service selects %v, not the pods %v", svc.Spec.Selector, ds.Spec.Template.Labels)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "metrics" || itoa(svc.Spec.Ports[0].Port) != port {
		t.Errorf("Service ports %+v, want %s to the metrics port", svc.Spec.Ports, port)
	}
}

// pinnedTag is the image tag every manifest names; checkImage keeps them
// to it, and README.md says how to build and push it.
const pinnedTag = "v0.1.0"

// checkImage: a fully qualified reference with a pinned version tag, not a
// moving one (latest with IfNotPresent leaves nodes on a stale build).
func checkImage(t *testing.T, ref string) {
	t.Helper()
	name, tag, ok := strings.Cut(ref, ":")
	if !ok || strings.Count(name, "/") < 2 {
		t.Errorf("image %q: want REGISTRY/NAMESPACE/NAME:TAG", ref)
	}
	if tag != pinnedTag {
		t.Errorf("image %q: want the pinned tag %s", ref, pinnedTag)
	}
}

// The README states the minimum Kubernetes version the manifests need
// (appArmorProfile is a field from 1.30) and how to build and push the
// pinned image.
func TestREADMEVersions(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Kubernetes 1.30", "make image-push IMAGE=", ":" + pinnedTag} {
		if !strings.Contains(string(readme), want) {
			t.Errorf("README.md does not say %q", want)
		}
	}
}

// hostCgroupMount is the container's read-only mount of the host's
// /sys/fs/cgroup elsewhere than /sys/fs/cgroup (where the container's own
// stays), or nil.
func hostCgroupMount(pod corev1.PodSpec) *corev1.VolumeMount {
	for _, v := range pod.Volumes {
		if v.HostPath == nil || v.HostPath.Path != "/sys/fs/cgroup" {
			continue
		}
		for _, c := range pod.Containers {
			for i, m := range c.VolumeMounts {
				if m.Name == v.Name && m.ReadOnly && m.MountPath != "/sys/fs/cgroup" {
					return &c.VolumeMounts[i]
				}
			}
		}
	}
	return nil
}

// The patch for NPD's DaemonSet decodes into the API type, and mounts what
// the plugin config names.
func TestNPDPatch(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("npd", "npd-patch.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(data, &ds); err != nil {
		t.Fatal(err)
	}
	pod := ds.Spec.Template.Spec
	if !pod.HostPID {
		t.Error("NPD without hostPID: doctor --pid 1 would check NPD's own container")
	}
	if len(pod.Containers) != 1 || pod.Containers[0].Name != "node-problem-detector" {
		t.Fatalf("containers %+v: want the one NPD's manifests name node-problem-detector", pod.Containers)
	}
	c := pod.Containers[0]
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		if !m.ReadOnly {
			t.Errorf("%s is mounted writable", m.MountPath)
		}
		mounts[m.Name] = m
	}
	var cm *corev1.ConfigMapVolumeSource
	var img *corev1.ImageVolumeSource
	for _, v := range pod.Volumes {
		if _, ok := mounts[v.Name]; !ok {
			t.Errorf("volume %s is not mounted", v.Name)
		}
		switch {
		case v.ConfigMap != nil:
			cm = v.ConfigMap
			if !strings.HasPrefix(mounts[v.Name].MountPath, "/config/cudatrace") {
				t.Errorf("the ConfigMap is at %s, the plugin config's paths say /config/cudatrace", mounts[v.Name].MountPath)
			}
		case v.Image != nil:
			img = v.Image
			bin := ""
			for _, e := range c.Env {
				if e.Name == "CUDATRACE" {
					bin = e.Value
				}
			}
			if want := filepath.Join(mounts[v.Name].MountPath, "cudatrace"); bin != want {
				t.Errorf("CUDATRACE=%q, but the image's /cudatrace is at %s", bin, want)
			}
		}
	}
	if cm == nil || cm.DefaultMode == nil || *cm.DefaultMode&0o111 == 0 {
		t.Error("no executable ConfigMap volume for the wrapper")
	}
	if img == nil {
		t.Error("no image volume with the cudatrace binary")
	} else {
		checkImage(t, img.Reference)
	}
	if hostCgroupMount(pod) == nil {
		t.Error("no read-only hostPath of /sys/fs/cgroup: doctor could not read PID 1's device programs from NPD's cgroup namespace")
	}
}

// npdConfig mirrors node-problem-detector's CustomPluginConfig
// (pkg/custompluginmonitor/types): decoding with unknown fields refused
// catches a misspelt key, which NPD itself would silently ignore.
type npdConfig struct {
	Plugin       string `json:"plugin"`
	PluginConfig struct {
		InvokeInterval string `json:"invoke_interval"`
		Timeout        string `json:"timeout"`
		MaxOutput      int    `json:"max_output_length"`
		Concurrency    int    `json:"concurrency"`
		MessageChange  bool   `json:"enable_message_change_based_condition_update"`
		SkipInitial    bool   `json:"skip_initial_status"`
	} `json:"pluginConfig"`
	Source     string `json:"source"`
	Metrics    bool   `json:"metricsReporting"`
	Conditions []struct {
		Type, Reason, Message string
	} `json:"conditions"`
	Rules []struct {
		Type      string   `json:"type"`
		Condition string   `json:"condition"`
		Reason    string   `json:"reason"`
		Path      string   `json:"path"`
		Args      []string `json:"args"`
		Timeout   string   `json:"timeout"`
	} `json:"rules"`
}

func TestNPDPluginConfig(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("npd", "cudatrace-plugin.json"))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var cfg npdConfig
	if err := dec.Decode(&cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Plugin != "custom" {
		t.Errorf("plugin %q: NPD supports only custom", cfg.Plugin)
	}
	global := parseDuration(t, cfg.PluginConfig.Timeout)
	conds := map[string]bool{}
	for _, c := range cfg.Conditions {
		conds[c.Type] = true
	}
	if !conds["CUDAUnavailable"] {
		t.Error("no CUDAUnavailable condition")
	}
	modes := map[string]bool{}
	for _, r := range cfg.Rules {
		// NPD refuses a rule timeout above the global one.
		if d := parseDuration(t, r.Timeout); d > global {
			t.Errorf("rule %s: timeout %s above the global %s", r.Reason, r.Timeout, cfg.PluginConfig.Timeout)
		}
		if r.Type == "permanent" && !conds[r.Condition] {
			t.Errorf("permanent rule %s: condition %q has no default", r.Reason, r.Condition)
		}
		// The wrapper is shipped in the ConfigMap under its own name.
		if filepath.Base(r.Path) != "cudatrace-health.sh" {
			t.Errorf("rule %s runs %s, not the wrapper", r.Reason, r.Path)
		}
		if len(r.Args) != 2 || r.Args[0] != "npd" {
			t.Errorf("rule %s args %q, want npd fail|warn", r.Reason, r.Args)
		} else {
			modes[r.Args[1]] = true
		}
	}
	if !modes["fail"] || !modes["warn"] {
		t.Errorf("rules cover %v, want fail and warn", modes)
	}
	if _, err := os.Stat(filepath.Join("..", "cudatrace-health.sh")); err != nil {
		t.Error(err)
	}
}

func parseDuration(t *testing.T, s string) int64 {
	t.Helper()
	m := regexp.MustCompile(`^(\d+)(s|m)$`).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("duration %q: want Ns or Nm", s)
	}
	n := int64(0)
	for _, d := range m[1] {
		n = n*10 + int64(d-'0')
	}
	if m[2] == "m" {
		n *= 60
	}
	return n
}

func flagValue(args []string, name string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }
