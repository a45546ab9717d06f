package policies

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// settingsRecorder builds settings whose Set records "name=value".
type settingsRecorder struct{ got []string }

func (r *settingsRecorder) settings() []Setting {
	mk := func(name string, kind SettingKind, path bool) Setting {
		return Setting{Name: name, Kind: kind, Path: path, Set: func(v string) error {
			if name == "dns_rate" && strings.HasPrefix(v, "-") {
				return errors.New("want a positive number of queries a second")
			}
			if name == "allow_private" && !strings.HasPrefix(v, "10.") {
				return fmt.Errorf("%q: not a private range", v)
			}
			r.got = append(r.got, name+"="+v)
			return nil
		}}
	}
	return []Setting{
		mk("root", SettingString, true),
		mk("uplink", SettingString, false),
		mk("stop_containerd", SettingBool, false),
		mk("dns_rate", SettingNumber, false),
		mk("dns_upstream", SettingList, false),
		mk("allow_private", SettingList, false),
		mk("admission", SettingString, true),
		mk("image", SettingList, true),
	}
}

func TestDecodeDaemonConfig(t *testing.T) {
	src := `
# A daemon's settings.
root            = "state"
uplink          = "host"
stop_containerd = true
dns_rate        = 12.5
dns_upstream    = ["10.0.0.53", "10.0.0.54:5353"]
allow_private   = "10.20.0.0/16"
image           = ["/usr/share/airlock/images/agent.tar", "extra.tar"]

admission {
  host_paths = ["/srv/agents"]
  users      = ["1000-1999"]
}
`
	r := &settingsRecorder{}
	c, diags := DecodeDaemonConfig("/etc/airlock/airlockd.hcl", []byte(src), r.settings(), func(name string) bool { return name == "uplink" })
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	want := []string{
		"root=/etc/airlock/state",
		"stop_containerd=true",
		"dns_rate=12.5",
		"dns_upstream=10.0.0.53", "dns_upstream=10.0.0.54:5353",
		"allow_private=10.20.0.0/16",
		"image=/usr/share/airlock/images/agent.tar", "image=/etc/airlock/extra.tar",
	}
	if !slices.Equal(r.got, want) {
		t.Errorf("set:\n got %q\nwant %q", r.got, want)
	}
	if !slices.Equal(c.Applied, []string{"root", "stop_containerd", "dns_rate", "dns_upstream", "allow_private", "image"}) {
		t.Errorf("applied %q", c.Applied)
	}
	if c.Admission == nil || !slices.Equal(c.Admission.HostPaths, []string{"/srv/agents"}) || len(c.Admission.Users) != 1 || c.Admission.Users[0] != (IDRange{1000, 1999}) {
		t.Errorf("admission %+v", c.Admission)
	}
	if c.Admission.Source != "/etc/airlock/airlockd.hcl" {
		t.Errorf("admission source %q", c.Admission.Source)
	}
}

func TestDecodeDaemonConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      string // in the first error, with its line
	}{
		{"unknown attribute", "root = \"/x\"\nuplnk = \"host\"\n", `cfg.hcl:2,1: Unsupported argument; An argument named "uplnk" is not expected here. Did you mean "uplink"?`},
		{"wrong type", "stop_containerd = \"yes\"\n", "cfg.hcl:1,19: Incorrect attribute value type; stop_containerd must be true or false"},
		{"number", "dns_rate = \"fast\"\n", "cfg.hcl:1,12: Incorrect attribute value type; dns_rate must be a number"},
		{"set refuses", "root = \"/x\"\n\ndns_rate = -1\n", "cfg.hcl:3,12: Invalid dns_rate; want a positive number of queries a second."},
		{"list element refused", "allow_private = [\"10.1.0.0/16\", \"8.8.8.0/24\"]\n", `cfg.hcl:1,17: Invalid allow_private; "8.8.8.0/24": not a private range.`},
		{"bad admission", "admission {\n  host_paths = [\"/srv\"]\n  users = [\"abc\"]\n}\n", "cfg.hcl:3,12: Invalid id range"},
		{"two admissions", "admission = \"/etc/airlock/admission.hcl\"\nadmission {\n  host_paths = [\"/srv\"]\n}\n", "cfg.hcl:1,1: Two admission policies"},
		{"duplicate block", "admission {\n  host_paths = [\"/srv\"]\n}\nadmission {\n  host_paths = [\"/srv\"]\n}\n", "cfg.hcl:4,1: Duplicate admission block"},
		{"syntax", "root = \n", "cfg.hcl:1,8: Invalid expression"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &settingsRecorder{}
			_, diags := DecodeDaemonConfig("cfg.hcl", []byte(tc.src), r.settings(), nil)
			if !diags.HasErrors() {
				t.Fatalf("no error; set %q", r.got)
			}
			if got := diags.Errors()[0].String(); !strings.HasPrefix(got, tc.want) {
				t.Errorf("first error:\n got %s\nwant %s...", got, tc.want)
			}
		})
	}
}

// A refused value stops the settings after it: the daemon exits on the
// error, and nothing the file names later is half-applied first.
func TestDecodeDaemonConfigStopsAtError(t *testing.T) {
	r := &settingsRecorder{}
	_, diags := DecodeDaemonConfig("cfg.hcl", []byte("root = \"/a\"\ndns_rate = -2\nuplink = \"host\"\n"), r.settings(), nil)
	if !diags.HasErrors() {
		t.Fatal("no error")
	}
	if !slices.Equal(r.got, []string{"root=/a"}) {
		t.Errorf("set %q, want only root", r.got)
	}
}

func TestReadDaemonPaths(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Settings the check does not need are not read, unknown ones neither.
	p, err := ReadDaemonPaths(write("a.hcl", "root = \"state\"\nbin_dir = \"/usr/local/libexec/airlock\"\nuplink = \"host\"\nwhatever = 1\nadmission {\n  host_paths = [\"/srv/agents\", \"/home\"]\n}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Root != filepath.Join(dir, "state") || p.BinDir != "/usr/local/libexec/airlock" || !slices.Equal(p.HostPaths, []string{"/srv/agents", "/home"}) {
		t.Errorf("%+v", p)
	}
	write("adm.hcl", "admission {\n  host_paths = [\"/srv/x\"]\n}\n")
	if p, err = ReadDaemonPaths(write("b.hcl", "admission = \"adm.hcl\"\n")); err != nil || !slices.Equal(p.HostPaths, []string{"/srv/x"}) || p.BinDir != "" {
		t.Errorf("%+v, %v", p, err)
	}
	if _, err := ReadDaemonPaths(write("c.hcl", "admission = \"missing.hcl\"\n")); err == nil || !strings.Contains(err.Error(), "c.hcl:1,") {
		t.Errorf("a missing admission file: %v", err)
	}
	if _, err := ReadDaemonPaths(write("d.hcl", "root = [\"x\"]\n")); err == nil || !strings.Contains(err.Error(), "d.hcl:1,") {
		t.Errorf("a bad root: %v", err)
	}
}
