package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
)

// The agent images (images/claude-code, images/codex), imported as
// `airlockd --image` imports them, run their agent's real binary at the
// pinned version in a hardened session: uid 1000, read-only root
// filesystem, no network, and no Node.js in the image.
func TestAgentImages(t *testing.T) {
	testutil.RequiresRoot(t)
	for _, a := range []struct {
		recipe, image, pkg, command string
	}{
		{"claude-code", "airlock/claude-code:bookworm", "@anthropic-ai/claude-code", "claude"},
		{"codex", "airlock/codex:bookworm", "@openai/codex", "codex"},
	} {
		t.Run(a.recipe, func(t *testing.T) {
			archive, err := daemontest.AgentImageArchive(a.recipe)
			if err != nil {
				t.Fatal(err)
			}
			version := pinnedVersion(t, a.recipe, a.pkg)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()

			start := time.Now()
			imgs, imported, err := h.Daemon.Runtime().ImportImageFile(ctx, archive)
			if err != nil {
				t.Fatalf("import %s: %v", archive, err)
			}
			t.Logf("import of %s: %v (imported %v)", a.image, time.Since(start).Round(time.Millisecond), imported)
			if len(imgs) != 1 || imgs[0].Name != "docker.io/"+a.image {
				t.Fatalf("import %s gave %+v, want the one image %s", archive, imgs, a.image)
			}
			// A second start of the daemon with the same archive finds
			// the image by the archive's index and imports nothing.
			start = time.Now()
			again, imported, err := h.Daemon.Runtime().ImportImageFile(ctx, archive)
			if err != nil || imported || len(again) != 1 || again[0].Digest != imgs[0].Digest {
				t.Errorf("second import: %+v imported=%v %v; want the image found in the store", again, imported, err)
			}
			t.Logf("second import of %s: %v", a.image, time.Since(start).Round(time.Millisecond))

			r := airlock(t, "", "image", "ls")
			want := fmt.Sprintf("%s %s", a.recipe, version)
			if !hasLine(r.stdout, a.image, want) {
				t.Errorf("image ls does not show %s as %q:\n%s", a.image, want, r.stdout)
			}

			m := filepath.Join(t.TempDir(), a.recipe+".hcl")
			if err := os.WriteFile(m, []byte(fmt.Sprintf(`session "e2e-%s" {
  image   = %q
  command = ["true"]
  user    = "1000:1000"
  timeout = "2m"
  env = {
    HOME = "/tmp"
  }
  resources {
    memory = "1GiB"
    pids   = 256
  }
}
`, a.recipe, a.image)), 0o644); err != nil {
				t.Fatal(err)
			}
			script := `id -u; id -g
touch /opt/probe 2>/dev/null && echo rootfs-writable || echo rootfs-read-only
command -v node nodejs || echo no-node
readlink -f "$(command -v ` + a.command + `)"
` + a.command + ` --version`
			r = airlock(t, "", "run", "--rm", "-f", m, "--", "sh", "-c", script)
			lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
			if r.code != 0 || len(lines) != 6 {
				t.Fatalf("run: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			for i, want := range []string{"1000", "1000", "rootfs-read-only", "no-node"} {
				if lines[i] != want {
					t.Errorf("line %d: %q, want %q (stdout %q)", i+1, lines[i], want, r.stdout)
				}
			}
			if !strings.HasPrefix(lines[4], "/opt/"+a.recipe+"/node_modules/") {
				t.Errorf("%s resolves to %q, want the npm package's binary under /opt/%s", a.command, lines[4], a.recipe)
			}
			if !strings.Contains(lines[5], version) {
				t.Errorf("%s --version = %q, want version %s", a.command, lines[5], version)
			}
			t.Logf("%s --version: %s", a.command, lines[5])
		})
	}
}

// pinnedVersion is the version of pkg that images/RECIPE/package.json pins.
func pinnedVersion(t *testing.T, recipe, pkg string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "images", recipe, "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	if err := json.Unmarshal(b, &p); err != nil || p.Dependencies[pkg] == "" {
		t.Fatalf("images/%s/package.json pins no %s: %v", recipe, pkg, err)
	}
	return p.Dependencies[pkg]
}

// hasLine reports whether out has a line starting with first (as
// containerd stores it, fully qualified) that also contains want.
func hasLine(out, first, want string) bool {
	for l := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(l, "docker.io/"+first+" ") && strings.Contains(l, want) {
			return true
		}
	}
	return false
}
