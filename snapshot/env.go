package snapshot

import (
	"regexp"
	"strings"
)

// diagnosticEnv are the only environment variables a report keeps, each
// because it can change whether or how CUDA initialises. Everything else
// stays out: an environment routinely holds API keys and tokens, and a
// report goes into bug tickets.
var diagnosticEnv = map[string]bool{
	"CUDA_VISIBLE_DEVICES":       true, // "" or -1 hides every GPU (cuInit 100)
	"CUDA_DEVICE_ORDER":          true, // which GPU is device 0
	"CUDA_MODULE_LOADING":        true, // lazy loading moves work out of init
	"CUDA_MPS_PIPE_DIRECTORY":    true, // an MPS server that is not there fails init
	"NVIDIA_VISIBLE_DEVICES":     true, // which GPUs the container toolkit passes in
	"NVIDIA_DRIVER_CAPABILITIES": true, // which driver libraries and nodes it passes in
	"NVIDIA_MIG_CONFIG_DEVICES":  true, // the MIG capability nodes it passes in
	"NVIDIA_MIG_MONITOR_DEVICES": true,
	"LD_LIBRARY_PATH":            true, // a stub libcuda first in the path (cuInit 34)
	"LD_PRELOAD":                 true, // an interposer in front of libcuda
}

// credentialWords in a variable's name mark its value as a secret.
var credentialWords = []string{"KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE", "SESSION", "PRIVATE"}

// MaskedValue replaces the value of a variable that looks like a credential.
const MaskedValue = "<masked>"

// DiagnosticEnv returns the variables of env a report may carry: those
// named in diagnosticEnv, with the value masked where the name looks like a
// credential (so the rule holds even if the list grows one). It is applied
// when the environment is captured, and again to reports written by older
// versions when they are redacted or rendered. nil when none is kept.
func DiagnosticEnv(env map[string]string) map[string]string {
	var out map[string]string
	for k, v := range env {
		if !diagnosticEnv[k] {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		if looksLikeCredential(k) {
			v = MaskedValue
		}
		v = MaskTokens(v) // NVIDIA_VISIBLE_DEVICES or LD_PRELOAD can carry one too
		out[k] = v
	}
	return out
}

func looksLikeCredential(name string) bool {
	up := strings.ToUpper(name)
	for _, w := range credentialWords {
		if strings.Contains(up, w) {
			return true
		}
	}
	return false
}

// tokenShape matches credentials by their well-known form wherever they
// stand: Hugging Face, GitHub, GitLab, OpenAI-style, Slack and AWS access
// keys, and the password of a URL's user:password@.
var tokenShape = regexp.MustCompile(`\b(?:hf_|ghp_|gho_|ghs_|ghu_|github_pat_|glpat-|sk-|xox[abposr]-|AKIA)[A-Za-z0-9_\-]{12,}|(://[^/:@\s]+:)[^@/\s]+@`)

// MaskTokens masks the credentials tokenShape finds in s.
func MaskTokens(s string) string {
	if !tokenShape.MatchString(s) {
		return s
	}
	return tokenShape.ReplaceAllStringFunc(s, func(m string) string {
		if sub := tokenShape.FindStringSubmatch(m); sub[1] != "" {
			return sub[1] + MaskedValue + "@"
		}
		return MaskedValue
	})
}

// MaskArgv applies the environment's rule to a command line: the value of
// an option whose name looks like a credential (--hf-token=V, --password
// V, API_KEY=V) is masked, as is any token of a well-known shape. argv[0]
// is kept but for tokens. It returns argv itself when nothing was masked.
func MaskArgv(argv []string) []string {
	var out []string
	set := func(i int, v string) {
		if v == argv[i] {
			return
		}
		if out == nil {
			out = append([]string(nil), argv...)
		}
		out[i] = v
	}
	maskNext := false
	for i, a := range argv {
		switch {
		case maskNext:
			maskNext = false
			if !strings.HasPrefix(a, "-") {
				set(i, MaskedValue)
				continue
			}
		case i == 0:
		default:
			if name, _, ok := strings.Cut(a, "="); ok && name != "" && looksLikeCredential(strings.TrimLeft(name, "-")) {
				set(i, name+"="+MaskedValue)
				continue
			}
			if strings.HasPrefix(a, "-") && !strings.Contains(a, "=") && looksLikeCredential(strings.TrimLeft(a, "-")) {
				maskNext = true
			}
		}
		set(i, MaskTokens(a))
	}
	if out == nil {
		return argv
	}
	return out
}
