package snapshot

import (
	"os"
	"regexp"
)

// NodeName names the machine in what a fleet collects (watch's lines, a
// report's host): the hostname, except where cudatrace has a UTS namespace
// other than PID 1's, as in a Kubernetes pod (with hostPID, PID 1 is the
// node's init): there the hostname is the pod's, and $NODE_NAME, which the
// DaemonSet sets from spec.nodeName, names the node. Outside a pod
// NODE_NAME may mean something else (Jenkins sets it to its agent's name),
// so it counts only there, and only when it is a valid node name.
func NodeName() string {
	host, _ := os.Hostname()
	return nodeName(os.Getenv("NODE_NAME"), otherUTSNamespace(), host)
}

func nodeName(env string, otherUTS bool, hostname string) string {
	if otherUTS && validNodeName(env) {
		return env
	}
	return hostname
}

// dnsSubdomain is RFC 1123's subdomain, what Kubernetes accepts as a node
// name (up to 253 characters).
var dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

func validNodeName(s string) bool {
	return len(s) <= 253 && dnsSubdomain.MatchString(s)
}

// initUTS is PID 1's UTS namespace (tests point it at another process's:
// a sandbox may deny access to its init's).
var initUTS = "/proc/1/ns/uts"

// otherUTSNamespace reports whether this process's UTS namespace is not PID
// 1's; unreadable is no.
func otherUTSNamespace() bool { return otherNamespace("/proc/self/ns/uts", initUTS) }
