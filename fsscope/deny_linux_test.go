package fsscope

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/policies"
)

// secretFiles are workspace files every default deny_read pattern (and
// the custom ones of denyPolicy) must hide: path -> content.
var secretFiles = map[string]string{
	".env":                                 "ENV_SECRET",
	".env.local":                           "ENV_LOCAL_SECRET",
	"svc/.env.production":                  "ENV_PROD_SECRET",
	"svc/.ENV":                             "ENV_CASE_SECRET",
	"certs/server.pem":                     "PEM_SECRET",
	"certs/server.key":                     "KEY_SECRET",
	"certs/bundle.p12":                     "P12_SECRET",
	"keys/id_rsa":                          "RSA_SECRET",
	"keys/ID_ED25519":                      "ED_SECRET",
	".ssh/deploy":                          "SSH_DIR_SECRET",
	".netrc":                               "NETRC_SECRET",
	".git-credentials":                     "GITCRED_SECRET",
	".pgpass":                              "PGPASS_SECRET",
	".aws/credentials":                     "AWS_SECRET",
	".aws/config":                          "AWS_CONFIG_SECRET",
	".azure/msal_token_cache.json":         "AZURE_SECRET",
	"home/.config/gcloud/credentials.db":   "GCLOUD_SECRET",
	"application_default_credentials.json": "ADC_SECRET",
	"home/.docker/config.json":             "DOCKER_SECRET",
	"home/.kube/config":                    "KUBE_SECRET",
	"home/.config/gh/hosts.yml":            "GH_SECRET",
	".vault-token":                         "VAULT_SECRET",
	"secrets/db/password.txt":              "CUSTOM_DIR_SECRET",
	"docs/cafe\u0301-notes.txt":            "NFD_SECRET", // custom pattern written in NFC
	"docs/CAF\u00c9-NOTES.TXT":             "CASE_NFC_SECRET",
}

// publicFiles must stay readable.
var publicFiles = map[string]string{
	"README.md":           "readme",
	"src/id_generator.go": "package id",
	"src/env.go":          "package env",
	".aws-notes.txt":      "notes",
}

const gitConfigWithToken = "[core]\n\tbare = false\n[remote \"origin\"]\n\turl = https://x-access-token:GITCONFIG_SECRET@github.com/org/app.git\n[credential]\n\thelper = store\n"

func denyWorkspace(t *testing.T) string {
	t.Helper()
	files := map[string]string{".git/config": gitConfigWithToken, ".git/HEAD": "ref: refs/heads/main\n", ".git/objects/": "", ".git/refs/": ""}
	for k, v := range secretFiles {
		files[k] = v
	}
	for k, v := range publicFiles {
		files[k] = v
	}
	host := hostTree(t, hostOwner, files)
	// A second name for .env, inside and outside a masked directory.
	for _, l := range []string{"innocent.txt", "svc/copy-of-aws"} {
		src := ".env"
		if l == "svc/copy-of-aws" {
			src = ".aws/credentials"
		}
		if err := os.Link(filepath.Join(host, src), filepath.Join(host, l)); err != nil {
			t.Fatal(err)
		}
	}
	return host
}

func denyPolicy(host, mode string) *policies.Policy {
	w := overlayWS(host)
	w.Mode = mode
	if mode != policies.ModeOverlay {
		w.OnExit = ""
	}
	w.DenyRead = []string{"secrets/", "docs/café-notes.txt"}
	return policyWith(w)
}

// TestDenyRead tries to read every hidden file through every way the
// sandbox has: directly, through "..", through /proc/self/root, through
// symlinks it makes, through hard links (existing ones, and new ones),
// by renaming or unmounting the mask (also from a user namespace of its
// own), in each workspace mode.
func TestDenyRead(t *testing.T) {
	for _, mode := range []string{policies.ModeOverlay, policies.ModeRO, policies.ModeRW} {
		for _, audited := range []bool{false, true} {
			name := mode
			if audited {
				name += "/audited"
			}
			t.Run(name, func(t *testing.T) { testDenyRead(t, mode, audited) })
		}
	}
}

func testDenyRead(t *testing.T, mode string, audited bool) {
	{
		{
			host := denyWorkspace(t)
			before := digest(t, host)
			var opts []Option
			if audited {
				ra := newReadAudit(t)
				opts = append(opts, WithReadAudit(ra.ReadAudit, "s1"))
			}
			s := setup(t, denyPolicy(host, mode), sandboxer, opts...)

			var actions []probeAction
			ways := func(p string) []string {
				dir, base := filepath.Split(p)
				return []string{
					"/workspace/" + p,
					"/workspace/" + dir + "./" + base,
					"/workspace/README.md/../" + p, // rejected by the kernel (ENOTDIR), never a bypass
					"/workspace/src/../" + p,
					"/proc/self/root/workspace/" + p,
					"/proc/self/cwd/../workspace/" + p,
					"//workspace//" + p,
				}
			}
			for p := range secretFiles {
				for _, w := range ways(p) {
					actions = append(actions, probeAction{Op: "read", Path: w})
				}
			}
			actions = append(actions,
				probeAction{Op: "read", Path: "/workspace/innocent.txt"},
				probeAction{Op: "read", Path: "/workspace/svc/copy-of-aws"},
				probeAction{Op: "readdir", Path: "/workspace/.aws"},
				probeAction{Op: "readdir", Path: "/workspace/secrets"},
				probeAction{Op: "readdir", Path: "/workspace/.ssh"},
				probeAction{Op: "mount", Path: "/workspace/README.md", Arg: "/workspace/.env"},
				probeAction{Op: "umount", Path: "/workspace/.env"},
				probeAction{Op: "rename", Path: "/workspace/.env.local", Arg: "/workspace/moved"},
				probeAction{Op: "read", Path: "/workspace/moved"},
				probeAction{Op: "rename", Path: "/workspace/.aws", Arg: "/workspace/aws-moved"},
				probeAction{Op: "read", Path: "/workspace/aws-moved/credentials"},
				probeAction{Op: "write", Path: "/workspace/.env", Arg: "overwritten"},
				probeAction{Op: "userns-umount-read", Path: "/workspace/.env"},
				probeAction{Op: "userns-umount-read", Path: "/workspace/.aws/credentials"},
			)
			if mode != policies.ModeRO {
				actions = append(actions,
					probeAction{Op: "link", Path: "/workspace/hl", Arg: "/workspace/.env"},
					probeAction{Op: "read", Path: "/workspace/hl"},
					probeAction{Op: "link", Path: "/workspace/hl2", Arg: "/workspace/.aws/credentials"},
					probeAction{Op: "symlink", Path: "/workspace/s1", Arg: ".env"},
					probeAction{Op: "read", Path: "/workspace/s1"},
					probeAction{Op: "symlink", Path: "/workspace/s2", Arg: "/workspace/.aws/credentials"},
					probeAction{Op: "read", Path: "/workspace/s2"},
					probeAction{Op: "symlink", Path: "/workspace/s3", Arg: "/proc/self/root/workspace/keys/id_rsa"},
					probeAction{Op: "read", Path: "/workspace/s3"},
					probeAction{Op: "symlink", Path: "/workspace/s4", Arg: "svc/../.ssh"},
					probeAction{Op: "read", Path: "/workspace/s4/deploy"},
				)
			}
			res := runProbe(t, s.Mounts(), sandboxer.UID, sandboxer.GID, actions...)
			secrets := make([]string, 0, len(secretFiles))
			for _, v := range secretFiles {
				secrets = append(secrets, v)
			}
			for _, r := range res {
				for _, sec := range append(secrets, "GITCONFIG_SECRET") {
					if strings.Contains(r.Data, sec) {
						t.Errorf("the sandbox read %s: %v", sec, r)
					}
				}
				switch r.Op {
				case "read", "readdir":
					if r.ok() && r.Data != "" {
						t.Errorf("hidden path readable: %v", r)
					}
				case "mount", "umount", "rename", "write", "link":
					// In an overlay workspace a masked file may be renamed
					// (see TestMaskedFileRemovable): the new name is empty.
					if r.ok() && (mode != policies.ModeOverlay || r.Op != "rename" || r.Path != "/workspace/.env.local") {
						t.Errorf("%s succeeded: %v", r.Op, r)
					}
				case "userns-umount-read":
					if !strings.Contains(r.Data, "read: open") && !strings.Contains(r.Data, "operation not permitted") {
						t.Errorf("from a user namespace: %v", r)
					}
				}
			}

			// What must stay readable is readable; the git config without its
			// credentials, but with the remote git needs.
			var okActions []probeAction
			for p := range publicFiles {
				okActions = append(okActions, probeAction{Op: "read", Path: "/workspace/" + p})
			}
			okActions = append(okActions, probeAction{Op: "read", Path: "/workspace/.git/config"})
			for _, r := range runProbe(t, s.Mounts(), sandboxer.UID, sandboxer.GID, okActions...) {
				if !r.ok() {
					t.Errorf("public file unreadable: %v", r)
					continue
				}
				if strings.HasSuffix(r.Path, ".git/config") {
					if strings.Contains(r.Data, "SECRET") || strings.Contains(r.Data, "credential") || !strings.Contains(r.Data, "url = \"https://github.com/org/app.git\"") {
						t.Errorf("sandbox's .git/config:\n%s", r.Data)
					}
				} else if want := publicFiles[strings.TrimPrefix(r.Path, "/workspace/")]; r.Data != want {
					t.Errorf("%s = %q, want %q", r.Path, r.Data, want)
				}
			}
			if mode != policies.ModeRW {
				if after := digest(t, host); after != before {
					t.Errorf("host workspace changed:\n%s\n---\n%s", before, after)
				}
			}
			for p, v := range secretFiles {
				if got := readFile(t, filepath.Join(host, p)); got != v {
					t.Errorf("host %s = %q", p, got)
				}
			}
		}
	}
}

// TestDenyReadDefaultsOff shows the operator's switch works.
func TestDenyReadDefaultsOff(t *testing.T) {
	host := hostTree(t, hostOwner, map[string]string{".env": "E", "key.pem": "K"})
	w := overlayWS(host)
	w.DefaultDenyRead = false
	s := setup(t, policyWith(w), hostOwner)
	res := mustProbe(t, s, hostOwner, probeAction{Op: "read", Path: "/workspace/.env"}, probeAction{Op: "read", Path: "/workspace/key.pem"})
	if res[0].Data != "E" || res[1].Data != "K" {
		t.Errorf("reads = %v", res)
	}
}

// TestMasksPlan checks the mask mounts' sources and options: in an rw
// workspace every mask is a mount; in an overlay workspace a masked file
// is the view's own empty entry, owned by root, mode 0, and only a masked
// directory is a mount.
func TestMasksPlan(t *testing.T) {
	host := hostTree(t, hostOwner, map[string]string{".env": "E", ".aws/credentials": "A", "src/a.go": "package a"})
	s := setup(t, policyWith(overlayWS(host)), hostOwner)
	ms := s.Mounts()
	if len(ms) != 2 || ms[0].Destination != "/workspace" || ms[1].Destination != "/workspace/.aws" {
		t.Fatalf("overlay mounts = %+v", ms)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(merged(s, 0), ".env"), &st); err != nil || st.Mode&0o7777 != 0 || st.Uid != s.st.Workspaces[0].MaskOwner || st.Uid != 65534 || st.Size != 0 {
		t.Errorf("the view's .env: mode %o uid %d size %d, %v", st.Mode&0o7777, st.Uid, st.Size, err)
	}
	rw := overlayWS(host)
	rw.Mode, rw.OnExit = policies.ModeRW, ""
	s = setup(t, policyWith(rw), hostOwner)
	ms = s.Mounts()
	if len(ms) != 3 || ms[0].Destination != "/workspace" || ms[1].Destination != "/workspace/.aws" || ms[2].Destination != "/workspace/.env" {
		t.Fatalf("rw mounts = %+v", ms)
	}
	for _, m := range ms[1:] {
		if strings.Join(m.Options, ",") != "bind,ro,nosuid,nodev,noexec" {
			t.Errorf("mask options %v", m.Options)
		}
		var st unix.Stat_t
		if err := unix.Stat(m.Source, &st); err != nil || st.Mode&0o777 != 0 || st.Uid != 0 {
			t.Errorf("mask source %s: mode %o uid %d, %v", m.Source, st.Mode&0o777, st.Uid, err)
		}
	}
	if got := fmt.Sprint(ms[0].Options); got != "[bind nosuid nodev rw]" {
		t.Errorf("workspace options %s", got)
	}
}
