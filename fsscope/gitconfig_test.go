package fsscope

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSanitizeGitConfig(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		changed bool
		gone    []string // substrings that must not survive
		kept    []string // `git config --list` lines that must survive
	}{
		{
			name: "plain config is untouched",
			in:   "[core]\n\trepositoryformatversion = 0\n\tbare = false\n[remote \"origin\"]\n\turl = git@github.com:org/app.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n",
			kept: []string{"core.bare=false", "remote.origin.url=git@github.com:org/app.git"},
		},
		{
			name:    "token in remote url",
			in:      "[remote \"origin\"]\n\turl = https://x-access-token:ghs_SECRET@github.com/org/app.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n",
			changed: true,
			gone:    []string{"ghs_SECRET", "x-access-token"},
			kept:    []string{"remote.origin.url=https://github.com/org/app.git", "remote.origin.fetch=+refs/heads/*:refs/remotes/origin/*"},
		},
		{
			name:    "token as user name",
			in:      "[remote \"origin\"]\n\turl = https://ghp_TOKEN@github.com/org/app.git\n",
			changed: true,
			gone:    []string{"ghp_TOKEN"},
			kept:    []string{"remote.origin.url=https://github.com/org/app.git"},
		},
		{
			name:    "ssh password stripped, user kept",
			in:      "[remote \"o\"]\n\turl = ssh://git:hunter2@host/app.git\n\tpushurl = ssh://git@host/app.git\n",
			changed: true,
			gone:    []string{"hunter2"},
			kept:    []string{"remote.o.url=ssh://git@host/app.git", "remote.o.pushurl=ssh://git@host/app.git"},
		},
		{
			name:    "credential sections",
			in:      "[core]\n\tbare = false\n[credential]\n\thelper = store --file=/home/u/.creds\n\tusername = alex\n[credential \"https://corp.test\"]\n\thelper = \"!f() { echo password=SECRET; }; f\"\n[user]\n\tname = Alex\n",
			changed: true,
			gone:    []string{"SECRET", "helper", ".creds"},
			kept:    []string{"core.bare=false", "user.name=Alex"},
		},
		{
			name:    "extraheader from actions/checkout",
			in:      "[http \"https://github.com/\"]\n\textraheader = AUTHORIZATION: basic U0VDUkVU\n\tsslVerify = true\n",
			changed: true,
			gone:    []string{"U0VDUkVU", "AUTHORIZATION"},
			kept:    []string{"http.https://github.com/.sslverify=true"},
		},
		{
			name:    "insteadOf with token in section name",
			in:      "[url \"https://oauth2:glpat-SECRET@gitlab.com/\"]\n\tinsteadOf = https://gitlab.com/\n",
			changed: true,
			gone:    []string{"glpat-SECRET", "oauth2"},
			kept:    []string{"url.https://gitlab.com/.insteadof=https://gitlab.com/"},
		},
		{
			name:    "variable on the header line and continuation",
			in:      "[credential] helper = cache\n[remote \"o\"] url = https://u:p@h/x \\\n\t.git\n[core]\n\teditor = vim\n",
			changed: true,
			gone:    []string{"cache", "u:p@"},
			kept:    []string{"remote.o.url=https://h/x \t.git", "core.editor=vim"},
		},
		{
			name:    "secret-named keys and comments",
			in:      "# pushed with https://bot:pw@h/x\n[github]\n\tuser = alex\n\ttoken = ghp_SECRET\n[sendemail]\n\tsmtpPass = SECRET2\n",
			changed: true,
			gone:    []string{"ghp_SECRET", "SECRET2", "bot:pw"},
			kept:    []string{"github.user=alex"},
		},
		{
			name:    "comments and quotes",
			in:      "# top\n[remote \"o\"]\n\turl = \"https://a:b@h/r.git\" ; trailing\n\tfetch = x # c\n",
			changed: true,
			gone:    []string{"a:b@"},
			kept:    []string{"remote.o.url=https://h/r.git", "remote.o.fetch=x"},
		},
	}
	git, gitErr := exec.LookPath("git")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, changed := SanitizeGitConfig([]byte(tt.in))
			if changed != tt.changed {
				t.Errorf("changed = %v, want %v", changed, tt.changed)
			}
			if !changed && string(out) != tt.in {
				t.Errorf("unchanged config rewritten:\n%s", out)
			}
			for _, g := range tt.gone {
				if strings.Contains(string(out), g) {
					t.Errorf("output still contains %q:\n%s", g, out)
				}
			}
			again, changed2 := SanitizeGitConfig(out)
			if changed2 || string(again) != string(out) {
				t.Errorf("sanitizing twice changed the output again:\n%s\n---\n%s", out, again)
			}
			if gitErr != nil {
				t.Skip("git not installed")
			}
			file := filepath.Join(t.TempDir(), "config")
			if err := os.WriteFile(file, out, 0o644); err != nil {
				t.Fatal(err)
			}
			list, err := exec.Command(git, "config", "--file", file, "--list").CombinedOutput()
			if err != nil {
				t.Fatalf("git cannot read the sanitized config: %v\n%s\n%s", err, list, out)
			}
			lines := strings.Split(strings.TrimSpace(string(list)), "\n")
			for _, k := range tt.kept {
				if !slices.Contains(lines, k) {
					t.Errorf("git config --list lacks %q; got %q", k, lines)
				}
			}
		})
	}
}

func TestGitExecChanges(t *testing.T) {
	old := "[core]\n\tbare = false\n[alias]\n\tco = checkout\n"
	tests := []struct {
		name, new string
		want      []string
	}{
		{"no change", old, nil},
		{"harmless keys", old + "[branch \"x\"]\n\tremote = origin\n[user]\n\tname = a\n", nil},
		{"fsmonitor", old + "[core]\n\tfsmonitor = /tmp/evil\n", []string{"core.fsmonitor"}},
		{"hooksPath", "[core]\n\thooksPath = .githooks\n", []string{"core.hookspath"}},
		{"shell alias", old + "[alias]\n\tst = !sh -c evil\n", []string{"alias.st"}},
		{"plain alias", old + "[alias]\n\tst = status\n", nil},
		{"filter driver", "[filter \"lfs\"]\n\tsmudge = evil %f\n", []string{"filter.lfs.smudge"}},
		{"include", "[include]\n\tpath = ../x\n", []string{"include.path"}},
		{"pager", "[pager]\n\tlog = evil\n", []string{"pager.log"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := gitExecChanges([]byte(old), []byte(tt.new))
			if !slices.Equal(got, tt.want) {
				t.Errorf("gitExecChanges = %q, want %q", got, tt.want)
			}
		})
	}
}

func FuzzSanitizeGitConfig(f *testing.F) {
	f.Add([]byte("[remote \"o\"]\n\turl = https://u:p@h/x\n"))
	f.Add([]byte("[credential] helper = x\n[core]\n\tbare\n"))
	f.Add([]byte("[url \"https://t@h/\"]\n\tinsteadOf = \"a\\\"b\" ; c\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		out, changed := SanitizeGitConfig(data)
		if !changed && string(out) != string(data) {
			t.Fatal("unchanged input rewritten")
		}
		again, changed2 := SanitizeGitConfig(out)
		if changed2 || string(again) != string(out) {
			t.Fatalf("not idempotent:\n%q\n%q", out, again)
		}
		if stripUserinfo(string(out)) != string(out) {
			t.Fatalf("userinfo survived in %q", out)
		}
		for _, it := range parseGitConfig(out) {
			if it.header && it.section == "credential" {
				t.Fatalf("credential section survived: %q", out)
			}
			if it.hasVar && stripUserinfo(it.v.Value) != it.v.Value {
				t.Fatalf("userinfo survived in %q", it.v.Value)
			}
		}
	})
}
