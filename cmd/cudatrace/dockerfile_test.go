package main

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// No docker engine runs here, so the Dockerfile is checked as text: the
// build is static and version-stamped, the final image is scratch, and
// .dockerignore keeps out what the build does not need but not what it does.
func TestDockerfile(t *testing.T) {
	root := filepath.Join("..", "..")
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var stages []string
	var build string
	goVersion := ""
	sc := bufio.NewScanner(strings.NewReader(strings.ReplaceAll(string(b), "\\\n", " ")))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "FROM "):
			stages = append(stages, strings.Fields(line)[1])
			img := strings.Fields(line)[1]
			// podman resolves no short names: every image but scratch is
			// fully qualified (registry/namespace/name).
			if img != "scratch" && strings.Count(strings.SplitN(img, ":", 2)[0], "/") < 2 {
				t.Errorf("FROM %s: not a fully qualified image name (docker.io/library/...)", img)
			}
			if m := regexp.MustCompile(`^docker\.io/library/golang:(\d+\.\d+)`).FindStringSubmatch(img); m != nil {
				goVersion = m[1]
			}
		case strings.HasPrefix(line, "RUN ") && strings.Contains(line, "go build"):
			build = line
		}
	}
	if len(stages) != 2 || stages[1] != "scratch" {
		t.Errorf("stages %v, want a Go build stage then scratch", stages)
	}
	for _, want := range []string{"CGO_ENABLED=0", "-X main.version=${VERSION}", "./cmd/cudatrace"} {
		if !strings.Contains(build, want) {
			t.Errorf("the go build line lacks %q: %s", want, build)
		}
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(mod); m == nil || string(m[1]) != goVersion {
		t.Errorf("the build image's Go %s is not go.mod's %s", goVersion, m[1])
	}
	// The example matches deploy/kubernetes: no CAP_KILL (nothing is stopped host-wide).
	if strings.Contains(string(b), "--cap-add=KILL") {
		t.Error("the example adds CAP_KILL, which deploy/kubernetes/README.md says watch does not need")
	}
	if !strings.Contains(string(b), "org.opencontainers.image.version=\"${VERSION}\"") {
		t.Error("the image carries no version label")
	}

	ign, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, l := range strings.Split(string(ign), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, l)
		}
	}
	ignored := func(path string) bool {
		for _, p := range patterns {
			p = strings.TrimPrefix(p, "**/")
			for _, part := range []string{path, filepath.Base(path)} {
				if ok, _ := filepath.Match(p, part); ok {
					return true
				}
			}
			if strings.HasPrefix(path, p+"/") || strings.Contains(path, "/"+p+"/") {
				return true
			}
		}
		return false
	}
	for _, must := range []string{"go.mod", "go.sum", "cmd/cudatrace/main.go", "tracer/ebpf/bpf_bpfel.o", "nvdev/nvtables.go"} {
		if ignored(must) {
			t.Errorf(".dockerignore leaves out %s, which the build needs", must)
		}
	}
	for _, out := range []string{".git", "bin", "testdata/gpu", "cmd/cudatrace/e2e_test.go"} {
		if !ignored(out) {
			t.Errorf(".dockerignore lets %s into the build context", out)
		}
	}
}
