package hostcheck

import (
	"bufio"
	"os"
	"strings"
	"testing"
)

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"containerd github.com/containerd/containerd/v2 v2.4.2 \n", "v2.4.2"},
		{"runc version 1.5.3\nspec: 1.3.0\ngo: go1.26.8\n", "v1.5.3"},
		{"containerd github.com/containerd/containerd/v2 v2.4.2-rc.1 abcdef", "v2.4.2-rc.1"},
		{"hello", ""},
		{"", ""},
		{"v2 only", ""},
	} {
		if got := parseVersion(tc.in); got != tc.want {
			t.Errorf("parseVersion(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestPinnedVersions keeps ContainerdVersion and RuncVersion equal to the
// pins hack/install-deps.sh builds.
func TestPinnedVersions(t *testing.T) {
	f, err := os.Open("../hack/versions.env")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pins := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), "="); ok && !strings.HasPrefix(k, "#") {
			pins[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	upstream, _, _ := strings.Cut(pins["CRUN_VERSION"], "-")
	if "v"+upstream != CrunVersion {
		t.Errorf("hack/versions.env has CRUN_VERSION=%q, hostcheck pins %q: change hostcheck/hostcheck.go to match", pins["CRUN_VERSION"], CrunVersion)
	}
	for k, v := range map[string]string{"CONTAINERD_VERSION": ContainerdVersion, "RUNC_VERSION": RuncVersion} {
		if pins[k] != v {
			t.Errorf("hack/versions.env has %s=%q, hostcheck pins %q: change hostcheck/hostcheck.go to match", k, pins[k], v)
		}
	}
}
