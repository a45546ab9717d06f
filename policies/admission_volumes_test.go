package policies

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

func TestDecodeAdmissionVolumePaths(t *testing.T) {
	a, diags := DecodeAdmission("adm.hcl", []byte("admission {\n  host_paths = [\"/srv/agents\"]\n  volume_paths = [\"/srv/airlock/volumes\"]\n}\n"))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if len(a.VolumePaths) != 1 || a.VolumePaths[0] != "/srv/airlock/volumes" {
		t.Errorf("VolumePaths %q", a.VolumePaths)
	}
	if !strings.Contains(a.String(), "volume paths /srv/airlock/volumes") {
		t.Errorf("String() = %q, want the volume paths", a.String())
	}
	for _, tt := range []struct{ name, src, want string }{
		// A volume's directory under an admitted host path could be
		// named by any session, whatever its claim.
		{"under a host path", "admission {\n  host_paths = [\"/srv\"]\n  volume_paths = [\n    \"/srv/airlock/volumes\",\n  ]\n}\n", "4:Volume path overlaps a host path"},
		{"holds a read-only path", "admission {\n  host_paths = [\"/home\"]\n  read_only_paths = [\"/srv/v/ro\"]\n  volume_paths = [\"/srv/v\"]\n}\n", "4:Volume path overlaps a host path"},
		{"the same", "admission {\n  host_paths = [\"/srv/v\"]\n  volume_paths = [\"/srv/v/\"]\n}\n", "3:Volume path overlaps a host path"},
		{"everything", "admission {\n  host_paths = [\"/\"]\n  volume_paths = [\"/srv/v\"]\n}\n", "3:Volume path overlaps a host path"},
		{"relative", "admission {\n  host_paths = [\"/home\"]\n  volume_paths = [\"srv/v\"]\n}\n", "3:Invalid volume path root"},
		{"protected", "admission {\n  host_paths = [\"/home\"]\n  volume_paths = [\"/var/lib/containerd/v\"]\n}\n", "3:Invalid volume path root"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, diags := DecodeAdmission("adm.hcl", []byte(tt.src))
			if a != nil || !diags.HasErrors() {
				t.Fatalf("decoded %+v; want an error", a)
			}
			var got []string
			for _, d := range diags.Errors() {
				got = append(got, strconv.Itoa(d.Line)+":"+d.Summary)
			}
			if len(got) != 1 || got[0] != tt.want {
				t.Errorf("errors %q, want [%q]\n%v", got, tt.want, diags)
			}
		})
	}
}

// TestAdmitVolumes: a PersistentVolume's directory is admitted as a
// workspace only when the in-process caller names it as a volume
// (WithVolumes) and it is under volume_paths; no API caller can name it as
// a host path, and a volume under a protected path or outside
// volume_paths is refused.
func TestAdmitVolumes(t *testing.T) {
	f := newAdmissionFixture(t)
	vols := filepath.Join(f.root, "volumes")
	vol := filepath.Join(vols, "pv-1")
	if err := os.MkdirAll(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	// A symlink under volume_paths into an admitted host path.
	if err := os.Symlink(filepath.Join(f.rw, "sub"), filepath.Join(vols, "into-rw")); err != nil {
		t.Fatal(err)
	}
	a := DefaultAdmission()
	a.HostPaths = []string{f.rw}
	a.VolumePaths = []string{vols}
	admit := func(hostPath, mode string, volumes ...string) (*Policy, error) {
		p := (&Policy{Label: "t", Image: "i", Command: []string{"true"}}).WithDefaults()
		p.Workspaces = []Workspace{{Target: "/w", HostPath: hostPath, Mode: mode, DefaultDenyRead: true, OnExit: OnExitReview}}
		pr := f.pr
		if len(volumes) > 0 {
			pr = pr.WithVolumes(volumes...)
		}
		_, err := a.Admit(p, pr)
		return p, err
	}
	for _, mode := range []string{ModeRW, ModeOverlay, ModeRO} {
		if p, err := admit(vol, mode, vol); err != nil || p.Workspaces[0].HostPath != vol {
			t.Errorf("a bound volume's directory, mode %s: %v (host path %q)", mode, err, p.Workspaces[0].HostPath)
		}
	}
	for _, tt := range []struct {
		name, hostPath string
		volumes        []string
		want           string
	}{
		{"named by an API caller", vol, nil, "is not under an admitted host path"},
		{"another volume's directory", vol, []string{filepath.Join(vols, "pv-2")}, "is not under an admitted host path"},
		{"outside volume_paths", f.outside, []string{f.outside}, "is not under the admission policy's volume_paths"},
		{"the daemon's root", filepath.Join(f.root, "state"), []string{filepath.Join(f.root, "state")}, "is a protected host path"},
		{"/etc", "/etc", []string{"/etc"}, `"/etc" is a protected host path`},
		{"a symlink into a host path", filepath.Join(vols, "into-rw"), []string{filepath.Join(vols, "into-rw")}, "is not under the admission policy's volume_paths"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := admit(tt.hostPath, ModeRW, tt.volumes...)
			var ae *AdmissionError
			if !errors.As(err, &ae) || !errdefs.IsPermissionDenied(err) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want an admission error saying %q", err, tt.want)
			}
		})
	}
	// volume_paths resolved under a host path (a symlinked root): refused
	// even as a volume.
	b := *a
	b.VolumePaths = []string{filepath.Join(vols, "into-rw")}
	p := (&Policy{Label: "t", Image: "i", Command: []string{"true"}}).WithDefaults()
	p.Workspaces = []Workspace{{Target: "/w", HostPath: filepath.Join(f.rw, "sub"), Mode: ModeRW, DefaultDenyRead: true, OnExit: OnExitReview}}
	if _, err := b.Admit(p, f.pr.WithVolumes(filepath.Join(f.rw, "sub"))); err == nil || !strings.Contains(err.Error(), "is also under an admitted host path") {
		t.Errorf("a volume path that resolves under a host path: %v, want refused", err)
	}
}

// TestHostPathRootOverVolumes: the decoder compares volume_paths with
// host_paths and read_only_paths as written, and admission checks a
// volume's resolved directory against the resolved host path roots; but
// a host path is never checked against volume_paths. When a host_paths
// (or read_only_paths) root is a symlink to a directory that holds a
// volume_paths root, the policy decodes, volumes are admitted, and any
// caller with no claim at all (an API caller on the socket, a Session's
// own host_path) names every volume's directory through the symlinked
// root: "no Session reaches a volume's directory but through its claim"
// does not hold.
func TestHostPathRootOverVolumes(t *testing.T) {
	base := t.TempDir()
	srv := filepath.Join(base, "srv")
	vols := filepath.Join(srv, "airlock", "volumes")
	victim := filepath.Join(vols, "pv-other-namespace")
	if err := os.MkdirAll(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "data")
	if err := os.Symlink(srv, link); err != nil {
		t.Fatal(err)
	}
	for _, attr := range []string{"host_paths", "read_only_paths"} {
		t.Run(attr, func(t *testing.T) {
			var src string
			mode := ModeRW
			if attr == "read_only_paths" {
				src = fmt.Sprintf("admission {\n  host_paths = [%q]\n  read_only_paths = [%q]\n  volume_paths = [%q]\n}\n", filepath.Join(base, "ws"), link, vols)
				mode = ModeRO
			} else {
				src = fmt.Sprintf("admission {\n  host_paths = [%q]\n  volume_paths = [%q]\n}\n", link, vols)
			}
			a, diags := DecodeAdmission("adm.hcl", []byte(src))
			if diags.HasErrors() {
				// Refusing such a policy at decode is one fix.
				t.Logf("refused at decode: %v", diags)
				return
			}
			p := (&Policy{Label: "t", Image: "i", Command: []string{"true"}}).WithDefaults()
			p.Workspaces = []Workspace{{Target: "/w", HostPath: filepath.Join(link, "airlock", "volumes", "pv-other-namespace"), Mode: mode, DefaultDenyRead: true, OnExit: OnExitReview}}
			if _, err := a.Admit(p, NewProtected()); err == nil {
				t.Errorf("%s root %s -> %s: a host_path with no claim admitted as %s, mode %s: another namespace's volume", attr, link, srv, p.Workspaces[0].HostPath, mode)
			}
		})
	}
}

// TestVolumeOncePerSource: a volume the in-process caller names is one
// workspace per time it is named; a second workspace naming the same
// directory (another target, another mode, or through a symlink) is
// refused, and a volume_paths root is no volume (it holds all of them).
func TestVolumeOncePerSource(t *testing.T) {
	f := newAdmissionFixture(t)
	vols := filepath.Join(f.root, "volumes")
	vol := filepath.Join(vols, "pv-1")
	if err := os.MkdirAll(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(vol, filepath.Join(f.rw, "to-vol")); err != nil {
		t.Fatal(err)
	}
	a := DefaultAdmission()
	a.HostPaths = []string{f.rw}
	a.VolumePaths = []string{vols}
	admit := func(ws []Workspace, volumes ...string) error {
		p := (&Policy{Label: "t", Image: "i", Command: []string{"true"}}).WithDefaults()
		p.Workspaces = ws
		_, err := a.Admit(p, f.pr.WithVolumes(volumes...))
		return err
	}
	ws := func(target, hostPath, mode string) Workspace {
		return Workspace{Target: target, HostPath: hostPath, Mode: mode, DefaultDenyRead: true, OnExit: OnExitReview}
	}
	if err := admit([]Workspace{ws("/a", vol, ModeRO), ws("/b", vol, ModeRO)}, vol, vol); err != nil {
		t.Errorf("a volume named twice (two sources of one claim), two workspaces: %v", err)
	}
	for name, tt := range map[string]struct {
		ws   []Workspace
		want string
	}{
		"a second workspace":          {[]Workspace{ws("/a", vol, ModeRO), ws("/b", vol, ModeRW)}, "a volume is one workspace per volume source"},
		"first the caller's own":      {[]Workspace{ws("/b", vol, ModeRW), ws("/a", vol, ModeRO)}, "a volume is one workspace per volume source"},
		"through a host path symlink": {[]Workspace{ws("/a", vol, ModeRO), ws("/b", filepath.Join(f.rw, "to-vol"), ModeRW)}, "a volume is one workspace per volume source"},
		"the root":                    {[]Workspace{ws("/a", vols, ModeRW)}, "is a volume_paths root itself"},
	} {
		dirs := []string{vol}
		if name == "the root" {
			dirs = []string{vols}
		}
		if err := admit(tt.ws, dirs...); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want refused saying %q", name, err, tt.want)
		}
	}
}

// TestVolumeTakenByResolvedPath: the node agent resolves a volume
// source's subPath beneath the volume's directory through no symlink and
// names the directory it found; whoever writes the volume can put a
// symlink in its place before the daemon admits it (to another volume's
// directory, which is under volume_paths too). The directory is taken
// only by its resolved path: one reached through a symlink is refused.
// And BeneathVolumePaths holds of a volume's directory, not of a root
// nor of a directory outside them.
func TestVolumeTakenByResolvedPath(t *testing.T) {
	f := newAdmissionFixture(t)
	vols := filepath.Join(f.root, "volumes")
	mine, theirs := filepath.Join(vols, "pv-1"), filepath.Join(vols, "pv-2")
	for _, d := range []string{filepath.Join(mine, "sub"), theirs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	a := DefaultAdmission()
	a.HostPaths = []string{f.rw}
	a.VolumePaths = []string{vols}
	admit := func(dir string) error {
		p := (&Policy{Label: "t", Image: "i", Command: []string{"true"}}).WithDefaults()
		p.Workspaces = []Workspace{{Target: "/w", HostPath: dir, Mode: ModeRW, DefaultDenyRead: true, OnExit: OnExitReview}}
		_, err := a.Admit(p, f.pr.WithVolumes(dir))
		return err
	}
	checked := filepath.Join(mine, "sub")
	if err := admit(checked); err != nil {
		t.Fatalf("the subPath's directory as checked: %v", err)
	}
	// Swapped for a symlink to another volume after the node's check.
	if err := os.Remove(checked); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(theirs, checked); err != nil {
		t.Fatal(err)
	}
	if err := admit(checked); err == nil || !strings.Contains(err.Error(), "through a symbolic link") {
		t.Errorf("the subPath swapped for a symlink to another volume: %v, want refused", err)
	}
	for p, want := range map[string]bool{mine: true, filepath.Join(mine, "sub"): true, vols: false, f.root: false, f.outside: false} {
		if got := a.BeneathVolumePaths(p); got != want {
			t.Errorf("BeneathVolumePaths(%s) = %v, want %v", p, got, want)
		}
	}
}
