package fsscope

import (
	"fmt"
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
		{"plain alias", old + "[alias]\n\tst = status\n", []string{"alias.st"}},
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

// TestGitExecKeys names every key the commit refuses to see changed, in
// the form git's documentation writes it, and ordinary keys that git
// itself changes (push -u, branch -D, remote add, maintenance) and that
// must still commit.
func TestGitExecKeys(t *testing.T) {
	refused := []string{
		"include.path", `includeIf "gitdir:~/x".path`, "core.excludesFile", "core.attributesFile",
		"init.templateDir", "commit.template",
		"core.hooksPath", `hook "lint".command`, `hook "lint".event`, "uploadpack.packObjectsHook",
		"core.fsmonitor", "core.worktree",
		"core.pager", "core.editor", "core.sshCommand", "core.askPass", "core.gitProxy",
		"core.alternateRefsCommand", "sequence.editor", "diff.external", `diff "x".textconv`,
		`diff "x".command`, "interactive.diffFilter", `merge "x".driver`, `filter "x".clean`,
		`filter "x".smudge`, `filter "x".process`, "credential.helper", `credential "https://h".helper`,
		"credential.username", "gpg.program", `gpg "ssh".program`, `gpg "x509".program`,
		`gpg "openpgp".program`, `gpg "ssh".defaultKeyCommand`, `gpg "ssh".allowedSignersFile`,
		`gpg "ssh".revocationFile`, `tar "tgz".command`, "pager.log", "web.browser",
		`browser "x".cmd`, `browser "x".path`, "man.viewer", `man "x".cmd`, `man "x".path`,
		`difftool "x".cmd`, `difftool "x".path`, `mergetool "x".cmd`, `mergetool "x".path`,
		`guitool "x".cmd`, `submodule "s".update`, "sendemail.smtpServer", "sendemail.toCmd",
		"sendemail.ccCmd", "sendemail.headerCmd", "sendemail.sendmailCmd", `sendemail "id".smtpServer`,
		"instaweb.httpd", "imap.tunnel", "alias.x", `trailer "x".command`, `trailer "x".cmd`,
		"ssh.variant", `remote "o".uploadpack`, `remote "o".receivepack`, `remote "o".vcs`,
		`remote "o".proxy`, "http.proxy", `http "https://h".proxy`, `url "/tmp/evil".insteadOf`,
		`url "/tmp/evil".pushInsteadOf`, "protocol.allow", `protocol "ext".allow`,
		"safe.directory", "safe.bareRepository", `lfs "customtransfer.x".path`,
		// git-lfs runs an extension's clean and smudge commands.
		`lfs "extension.x".clean`, `lfs "extension.x".smudge`,
		// Not a command, but what git creates becomes world-writable.
		"core.sharedRepository",
		// Names no list has yet, caught by their suffix.
		"future.someCommand", `future "x".program`,
	}
	for _, k := range refused {
		data := configSetting(k, "!touch /tmp/pwned")
		if got := gitExecChanges(nil, []byte(data)); len(got) == 0 {
			t.Errorf("%s: a change is not refused\n%s", k, data)
		}
	}
	for _, url := range []string{"ext::sh -c touch% /tmp/pwned", "fd::17"} {
		data := configSetting(`remote "o".url`, url)
		if got := gitExecChanges(nil, []byte(data)); len(got) == 0 {
			t.Errorf("remote url %q is not refused", url)
		}
	}
	// Aliases without "!" run commands too.
	for _, a := range []string{"-c core.fsmonitor=touch\\ /tmp/pwned status", "submodule foreach touch /tmp/pwned", "status"} {
		if got := gitExecChanges(nil, []byte(configSetting("alias.st", a))); len(got) == 0 {
			t.Errorf("alias %q is not refused", a)
		}
	}
	// Fetch refspecs into branches or tags, and pruning tags, move refs
	// the next fetch on the host.
	for k, v := range map[string]string{`remote "o".fetch`: "+refs/heads/x:refs/tags/v1", `remote "p".fetch`: "refs/heads/x:main",
		`remote "o".pruneTags`: "true", "fetch.pruneTags": "true"} {
		if got := gitExecChanges(nil, []byte(configSetting(k, v))); len(got) == 0 {
			t.Errorf("%s = %s is not refused", k, v)
		}
	}
	ordinary := map[string]string{
		`branch "topic".remote`: "origin", `branch "topic".merge`: "refs/heads/topic",
		`remote "o".url`: "https://git.corp.test/app.git", `remote "o".fetch`: "+refs/heads/*:refs/remotes/o/*", `remote "p".fetch`: "^refs/heads/wip",
		`remote "q".fetch`:             "refs/heads/main",
		"core.repositoryformatversion": "0", "core.filemode": "true", "core.bare": "false",
		"core.logallrefupdates": "true", "user.name": "alex", "gc.auto": "0",
		"maintenance.auto": "false", "extensions.worktreeConfig": "true",
		`submodule "s".url`: "https://git.corp.test/lib.git", `submodule "s".active`: "true",
	}
	for k, v := range ordinary {
		if got := gitExecChanges(nil, []byte(configSetting(k, v))); len(got) != 0 {
			t.Errorf("%s = %s refused: %v", k, v, got)
		}
	}
	// A line the parser cannot read counts as a change.
	if got := gitExecChanges([]byte("[core]\n"), []byte("[core]\n\tfsmonitor = \"unterminated\n")); len(got) == 0 {
		t.Error("an unparseable line is not refused")
	}
}

// configSetting renders `section "sub".key` (or section.key) = value as a
// config file.
func configSetting(name, value string) string {
	sec, key := name[:strings.LastIndex(name, ".")], name[strings.LastIndex(name, ".")+1:]
	if s, sub, ok := strings.Cut(sec, " "); ok {
		return fmt.Sprintf("[%s %s]\n\t%s = %q\n", s, sub, key, value)
	}
	return fmt.Sprintf("[%s]\n\t%s = %q\n", sec, key, value)
}

func TestGitUpstreamChanges(t *testing.T) {
	old := "[remote \"origin\"]\n\turl = https://h/app.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n" +
		"[branch \"main\"]\n\tremote = origin\n\tmerge = refs/heads/main\n"
	for _, c := range []struct {
		name, add string
		want      []string
	}{
		{"unchanged", "", nil},
		{"another branch's upstream", "[branch \"topic\"]\n\tremote = origin\n\tmerge = refs/heads/topic\n", []string{"topic"}},
		{"merge", "[branch \"main\"]\n\tmerge = refs/heads/evil\n", []string{"main"}},
		{"remote", "[branch \"main\"]\n\tremote = .\n", []string{"main"}},
		{"remote url", "[remote \"origin\"]\n\turl = ./evil.bundle\n", []string{"main"}},
		{"remote fetch", "[remote \"origin\"]\n\tfetch = +refs/heads/evil:refs/remotes/origin/main\n", []string{"main"}},
		{"another remote", "[remote \"up\"]\n\turl = https://h/up.git\n", nil},
	} {
		if got := gitUpstreamChanges([]byte(old), []byte(old+c.add)); !slices.Equal(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}
