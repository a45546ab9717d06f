package secrets

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock/policies"
)

// value is a secret value the tests look for wherever it must not be.
const value = "sk-test-6f1d0c0ffee5ecret"

func writeFile(t *testing.T, p string, b []byte, mode os.FileMode) string {
	t.Helper()
	if err := os.WriteFile(p, b, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	plain := writeFile(t, filepath.Join(dir, "plain"), []byte(value), 0o600)
	nl := writeFile(t, filepath.Join(dir, "nl"), []byte(value+"\n"), 0o600)
	crlf := writeFile(t, filepath.Join(dir, "crlf"), []byte(value+"\r\n"), 0o600)
	twoNL := writeFile(t, filepath.Join(dir, "twonl"), []byte(value+"\n\n"), 0o600)
	inner := writeFile(t, filepath.Join(dir, "inner"), []byte("line1\nline2\n"), 0o600)
	empty := writeFile(t, filepath.Join(dir, "empty"), nil, 0o600)
	onlyNL := writeFile(t, filepath.Join(dir, "onlynl"), []byte("\n"), 0o600)
	max := writeFile(t, filepath.Join(dir, "max"), append(bytes.Repeat([]byte("a"), MaxValue), '\n'), 0o600)
	big := writeFile(t, filepath.Join(dir, "big"), bytes.Repeat([]byte("a"), MaxValue+1), 0o600)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(plain, link); err != nil {
		t.Fatal(err)
	}
	// Planted after admission: a directory on the way that is a symlink,
	// and a second name for the file.
	linkDir := filepath.Join(dir, "linkdir")
	if err := os.Symlink(dir, linkDir); err != nil {
		t.Fatal(err)
	}
	hard := writeFile(t, filepath.Join(dir, "hard"), []byte(value), 0o600)
	if err := os.Link(hard, filepath.Join(dir, "hard2")); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AIRLOCK_TEST_SECRET", value)
	t.Setenv("AIRLOCK_TEST_EMPTY", "")

	for _, tc := range []struct {
		from  string
		want  string
		class func(error) bool
	}{
		{from: "env:AIRLOCK_TEST_SECRET", want: value},
		{from: "file:" + plain, want: value},
		{from: "file:" + nl, want: value},
		{from: "file:" + crlf, want: value},
		{from: "file:" + twoNL, want: value + "\n"},
		{from: "file:" + inner, want: "line1\nline2"},
		{from: "file:" + max, want: strings.Repeat("a", MaxValue)},
		{from: "env:AIRLOCK_TEST_UNSET", class: errdefs.IsFailedPrecondition},
		{from: "env:AIRLOCK_TEST_EMPTY", class: errdefs.IsFailedPrecondition},
		{from: "env:", class: errdefs.IsInvalidArgument},
		{from: "env:A=B", class: errdefs.IsInvalidArgument},
		{from: "file:" + empty, class: errdefs.IsFailedPrecondition},
		{from: "file:" + onlyNL, class: errdefs.IsFailedPrecondition},
		{from: "file:" + big, class: errdefs.IsFailedPrecondition},
		{from: "file:" + link, class: errdefs.IsFailedPrecondition},
		{from: "file:" + fifo, class: errdefs.IsFailedPrecondition},
		{from: "file:" + filepath.Join(linkDir, "plain"), class: errdefs.IsFailedPrecondition},
		{from: "file:" + hard, class: errdefs.IsFailedPrecondition},
		{from: "file:" + dir, class: errdefs.IsFailedPrecondition},
		{from: "file:" + filepath.Join(dir, "missing"), class: errdefs.IsFailedPrecondition},
		{from: "file:relative/path", class: errdefs.IsInvalidArgument},
		{from: "file:", class: errdefs.IsInvalidArgument},
		{from: "vault:kv/x", class: errdefs.IsInvalidArgument},
		{from: "AIRLOCK_TEST_SECRET", class: errdefs.IsInvalidArgument},
		{from: "", class: errdefs.IsInvalidArgument},
	} {
		t.Run(tc.from, func(t *testing.T) {
			v, err := Resolve(tc.from)
			if tc.class == nil {
				if err != nil || string(v) != tc.want {
					t.Errorf("Resolve(%q) = %d bytes, %v; want %d bytes", tc.from, len(v), err, len(tc.want))
				}
				return
			}
			if err == nil {
				t.Fatalf("Resolve(%q) = %d bytes, want an error", tc.from, len(v))
			}
			if !tc.class(err) {
				t.Errorf("Resolve(%q): %v: wrong class", tc.from, err)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.from)) {
				t.Errorf("Resolve(%q): %q does not name the source", tc.from, err)
			}
		})
	}
	// A symlink is refused even though its target is fine, and the error
	// says why without the value.
	for _, l := range []string{link, filepath.Join(linkDir, "plain")} {
		_, err := Resolve("file:" + l)
		if err == nil || !strings.Contains(err.Error(), "symbolic link") || strings.Contains(err.Error(), value) {
			t.Errorf("symlink %s: error %v", l, err)
		}
	}
	if _, err := Resolve("file:" + hard); err == nil || !strings.Contains(err.Error(), "2 hard links") {
		t.Errorf("hard link: error %v", err)
	}
}

func TestPlaceholders(t *testing.T) {
	a, err := NewPlaceholder()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewPlaceholder()
	if a == b || !IsPlaceholder(a) || !IsPlaceholder(b) || len(a) != PlaceholderLen || !strings.HasPrefix(a, PlaceholderPrefix) {
		t.Fatalf("placeholders %q %q", a, b)
	}
	for _, s := range []string{"", PlaceholderPrefix, a[:len(a)-1], a + "0", strings.ToUpper(a), PlaceholderPrefix + strings.Repeat("g", 40)} {
		if IsPlaceholder(s) {
			t.Errorf("IsPlaceholder(%q) = true", s)
		}
	}
	text := "x-api-key: " + a + "\r\nbody=" + PlaceholderPrefix + "zz&q=" + b + a + " " + a[:30]
	got := Placeholders([]byte(text))
	if !slices.Equal(got, []string{a, b, a}) {
		t.Errorf("Placeholders = %q, want %q", got, []string{a, b, a})
	}
	if got := Placeholders([]byte("nothing here")); got != nil {
		t.Errorf("Placeholders of plain text = %q", got)
	}
}

func defs(t *testing.T) ([]policies.Secret, string) {
	t.Helper()
	src := writeFile(t, filepath.Join(t.TempDir(), "api-key"), []byte(value+"\n"), 0o600)
	t.Setenv("AIRLOCK_TEST_TOKEN", "tok-"+value)
	return []policies.Secret{
		{Name: "ANTHROPIC_API_KEY", From: "file:" + src, Inject: []policies.SecretInject{{Host: "api.anthropic.com", Header: "x-api-key"}}},
		{Name: "gh", From: "env:AIRLOCK_TEST_TOKEN", EnvVar: "GH_TOKEN", Path: "/run/secrets/gh", Inject: []policies.SecretInject{{Host: "api.github.com", Bearer: true}}},
		{Name: "file-only", From: "env:AIRLOCK_TEST_TOKEN", Path: "/etc/tool/token"},
	}, src
}

func TestPrepareAndDeliver(t *testing.T) {
	ds, _ := defs(t)
	dir := t.TempDir()
	s, err := Prepare(dir, ds)
	if err != nil {
		t.Fatal(err)
	}
	bound := s.Bound()
	if len(bound) != 3 {
		t.Fatalf("%d bound secrets, want 3", len(bound))
	}
	if bound[0].Name != "ANTHROPIC_API_KEY" || string(bound[0].Value) != value || bound[0].Inject[0].Header != "x-api-key" {
		t.Errorf("bound[0] = %v (value %d bytes)", bound[0], len(bound[0].Value))
	}
	if string(bound[1].Value) != "tok-"+value || !bound[1].Inject[0].Bearer {
		t.Errorf("bound[1] = %v", bound[1])
	}
	for _, b := range bound {
		if !IsPlaceholder(b.Placeholder) {
			t.Errorf("%s: placeholder %q", b.Name, b.Placeholder)
		}
	}
	wantEnv := []string{"ANTHROPIC_API_KEY=" + bound[0].Placeholder, "GH_TOKEN=" + bound[1].Placeholder}
	if env := s.Env(); !slices.Equal(env, wantEnv) {
		t.Errorf("Env = %q, want %q", env, wantEnv)
	}

	spec := &oci.Spec{Process: &specs.Process{Env: []string{"PATH=/bin", "GH_TOKEN=from-the-manifest"}}}
	for _, opt := range s.SpecOpts() {
		if err := opt(t.Context(), nil, &containers.Container{}, spec); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Contains(spec.Process.Env, wantEnv[0]) || !slices.Contains(spec.Process.Env, wantEnv[1]) || slices.Contains(spec.Process.Env, "GH_TOKEN=from-the-manifest") {
		t.Errorf("spec env %q", spec.Process.Env)
	}
	mounts := map[string]specs.Mount{}
	for _, m := range spec.Mounts {
		mounts[m.Destination] = m
	}
	if len(mounts) != 2 {
		t.Errorf("mounts %v, want /run/secrets/gh and /etc/tool/token", spec.Mounts)
	}
	for dst, b := range map[string]Bound{"/run/secrets/gh": bound[1], "/etc/tool/token": bound[2]} {
		m, ok := mounts[dst]
		if !ok {
			t.Errorf("no mount on %s", dst)
			continue
		}
		if m.Type != "bind" || !slices.Equal(m.Options, []string{"rbind", "ro", "nosuid", "nodev", "noexec"}) {
			t.Errorf("mount %s: %s %v", dst, m.Type, m.Options)
		}
		got, err := os.ReadFile(m.Source)
		if err != nil || string(got) != b.Placeholder {
			t.Errorf("placeholder file for %s: %q, %v; want %q", dst, got, err, b.Placeholder)
		}
		if st, _ := os.Stat(m.Source); st.Mode().Perm() != 0o444 {
			t.Errorf("placeholder file mode %v", st.Mode().Perm())
		}
	}
	// The value is in no file of the state directory.
	assertNotUnder(t, dir, value)
	if st, _ := os.Stat(filepath.Join(dir, StateFile)); st.Mode().Perm() != 0o600 {
		t.Errorf("%s mode %v, want 0600", StateFile, st.Mode().Perm())
	}
}

// assertNotUnder fails if any file under dir contains needle.
func assertNotUnder(t *testing.T, dir, needle string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(needle)) {
			t.Errorf("%s holds the secret value", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestOpenKeepsPlaceholders: a restarted daemon gets the placeholders of
// before and reads the values again; a secret whose source is gone is
// unavailable until it comes back.
func TestOpenKeepsPlaceholders(t *testing.T) {
	ds, src := defs(t)
	dir := t.TempDir()
	s, err := Prepare(dir, ds)
	if err != nil {
		t.Fatal(err)
	}
	before := s.Bound()

	if err := os.WriteFile(src, []byte("rotated\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(dir, ds)
	if err != nil {
		t.Fatal(err)
	}
	after := s2.Bound()
	for i := range before {
		if after[i].Placeholder != before[i].Placeholder {
			t.Errorf("%s: placeholder %q after Open, %q before", before[i].Name, after[i].Placeholder, before[i].Placeholder)
		}
	}
	if string(after[0].Value) != "rotated" {
		t.Errorf("value after Open: %d bytes, want the source's current value", len(after[0].Value))
	}
	if !slices.Equal(s2.Env(), s.Env()) {
		t.Errorf("Env after Open %q, before %q", s2.Env(), s.Env())
	}

	if err := os.Remove(src); err != nil {
		t.Fatal(err)
	}
	s3, err := Open(dir, ds)
	if s3 == nil || err == nil || !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), `secret "ANTHROPIC_API_KEY" is unavailable`) {
		t.Fatalf("Open with a source gone: %v, %v", s3, err)
	}
	b := s3.Bound()
	if b[0].Available() || b[0].Placeholder != before[0].Placeholder || !b[1].Available() {
		t.Errorf("after Open with a source gone: %v", b)
	}
	writeFile(t, src, []byte(value), 0o600)
	if err := s3.Resolve(); err != nil {
		t.Fatal(err)
	}
	if b := s3.Bound(); string(b[0].Value) != value {
		t.Error("Resolve did not bring back the value of a source that returned")
	}

	t.Run("state damaged", func(t *testing.T) {
		if err := os.WriteFile(filepath.Join(dir, StateFile), []byte(`{"placeholders":{"gh":"x"}}`), 0o600); err != nil {
			t.Fatal(err)
		}
		if s, err := Open(dir, ds); s != nil || err == nil {
			t.Errorf("Open of a state without placeholders: %v, %v", s, err)
		}
		if s, err := Open(t.TempDir(), ds); s != nil || err == nil {
			t.Errorf("Open without a state: %v, %v", s, err)
		}
	})
}

func TestPrepareRefuses(t *testing.T) {
	ds, _ := defs(t)
	for name, tc := range map[string]struct {
		defs  []policies.Secret
		class func(error) bool
		want  string
	}{
		"source missing": {append(slices.Clone(ds), policies.Secret{Name: "gone", From: "env:AIRLOCK_TEST_NOT_SET"}), errdefs.IsFailedPrecondition, `secret "gone"`},
		"bad source":     {[]policies.Secret{{Name: "x", From: "http://example.test"}}, errdefs.IsInvalidArgument, `secret "x"`},
		"no name":        {[]policies.Secret{{From: "env:AIRLOCK_TEST_TOKEN"}}, errdefs.IsInvalidArgument, "without a name"},
		"twice":          {[]policies.Secret{ds[1], ds[1]}, errdefs.IsInvalidArgument, "declared twice"},
		"relative path":  {[]policies.Secret{{Name: "x", From: "env:AIRLOCK_TEST_TOKEN", Path: "tok"}}, errdefs.IsInvalidArgument, "absolute"},
		"root path":      {[]policies.Secret{{Name: "x", From: "env:AIRLOCK_TEST_TOKEN", Path: "/"}}, errdefs.IsInvalidArgument, "absolute"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Prepare(dir, tc.defs)
			if s != nil || err == nil || !tc.class(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Prepare = %v, %v; want a %s error", s, err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), value) {
				t.Errorf("the error holds the value: %v", err)
			}
		})
	}
	if s, err := Prepare(t.TempDir(), nil); s != nil || err != nil {
		t.Errorf("Prepare without secrets = %v, %v; want nil, nil", s, err)
	}
	var none *Set
	if none.Bound() != nil || none.Env() != nil || none.SpecOpts() != nil || none.Resolve() != nil {
		t.Error("a nil Set is not empty")
	}
}

// TestBoundNeverShowsValue: printing, logging or encoding a Bound leaves
// its value out.
func TestBoundNeverShowsValue(t *testing.T) {
	b := Bound{Name: "k", Placeholder: PlaceholderPrefix + strings.Repeat("0", 40), Value: []byte(value),
		Inject: []policies.SecretInject{{Host: "h.test", Header: "x-k"}}}
	var out bytes.Buffer
	fmt.Fprintf(&out, "%v %+v %#v %s %q ", b, b, b, b, b)
	fmt.Fprintf(&out, "%v %+v ", []Bound{b}, &b)
	slog.New(slog.NewTextHandler(&out, nil)).Info("x", "secret", b)
	slog.New(slog.NewJSONHandler(&out, nil)).Info("x", "secret", b)
	j, err := json.Marshal([]Bound{b})
	if err != nil {
		t.Fatal(err)
	}
	out.Write(j)
	if strings.Contains(out.String(), value) || strings.Contains(out.String(), fmt.Sprint([]byte(value))) {
		t.Errorf("the value shows in %s", out.String())
	}
	if !strings.Contains(out.String(), b.Placeholder) {
		t.Error("the placeholder does not show")
	}
}

func TestSetConcurrent(t *testing.T) {
	ds, _ := defs(t)
	s, err := Prepare(t.TempDir(), ds)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				_ = s.Resolve()
			}
		})
		wg.Go(func() {
			for range 50 {
				for _, b := range s.Bound() {
					if !b.Available() {
						t.Error("a secret went unavailable while its source stayed")
					}
				}
			}
		})
	}
	wg.Wait()
}

// TestCredentialSource: a secret from a credential has no value until the
// credential's token is handed over, takes each new one, and is kept when
// the file and env sources are read again.
func TestCredentialSource(t *testing.T) {
	dir := t.TempDir()
	defs := []policies.Secret{{Name: "TOK", From: "credential:api",
		Inject: []policies.SecretInject{{Host: "api.test", Bearer: true}}}}
	s, err := Prepare(dir, defs)
	if err != nil {
		t.Fatal(err)
	}
	if v := s.Bound()[0].Value; v != nil {
		t.Fatalf("value before the credential was minted: %q", v)
	}
	s.SetCredential("other", []byte("nope"))
	s.SetCredential("api", []byte("t1"))
	if v := s.Bound()[0].Value; string(v) != "t1" {
		t.Fatalf("value %q, want t1", v)
	}
	if err := s.Resolve(); err != nil {
		t.Fatal(err)
	}
	s.SetCredential("api", []byte("t2"))
	if v := s.Bound()[0].Value; string(v) != "t2" {
		t.Fatalf("value after a refresh %q, want t2", v)
	}
	o, err := Open(dir, defs)
	if err != nil {
		t.Fatal(err)
	}
	if o.Bound()[0].Placeholder != s.Bound()[0].Placeholder || o.Bound()[0].Value != nil {
		t.Errorf("reopened: %+v", o.Bound()[0])
	}
}

func TestReviseKeepsPlaceholders(t *testing.T) {
	dir := t.TempDir()
	a := writeFile(t, filepath.Join(dir, "a"), []byte("value-a\n"), 0o600)
	b := writeFile(t, filepath.Join(dir, "b"), []byte("value-b\n"), 0o600)
	b2 := writeFile(t, filepath.Join(dir, "b2"), []byte("value-b2\n"), 0o600)
	defs := []policies.Secret{
		{Name: "A", From: "file:" + a, Inject: []policies.SecretInject{{Host: "a.test", Bearer: true}}},
		{Name: "B", From: "file:" + b, Inject: []policies.SecretInject{{Host: "b.test", Bearer: true}}},
		{Name: "C", From: "file:" + a},
	}
	s, err := Prepare(filepath.Join(dir), defs)
	if err != nil {
		t.Fatal(err)
	}
	before := s.Bound()

	// Added, moved, or a source that cannot be read: refused, nothing
	// changes.
	for name, bad := range map[string][]policies.Secret{
		"added":      append(slices.Clone(defs), policies.Secret{Name: "D", From: "file:" + a}),
		"moved":      {defs[0], {Name: "B", From: "file:" + b, EnvVar: "ELSEWHERE"}},
		"unreadable": {defs[0], {Name: "B", From: "file:" + filepath.Join(dir, "missing")}},
	} {
		if _, err := s.Revise(bad); err == nil {
			t.Errorf("%s: revised", name)
		}
		if got := s.Bound(); !reflect.DeepEqual(got, before) {
			t.Errorf("%s: the set changed: %v", name, got)
		}
	}

	revised := []policies.Secret{
		{Name: "B", From: "file:" + b2, Inject: []policies.SecretInject{{Host: "c.test", Header: "X-Key"}}},
		defs[0],
	}
	undo, err := s.Revise(revised)
	if err != nil {
		t.Fatal(err)
	}
	got := s.Bound()
	if len(got) != 2 || got[0].Name != "B" || got[1].Name != "A" {
		t.Fatalf("revised: %v", got)
	}
	if got[0].Placeholder != before[1].Placeholder || got[1].Placeholder != before[0].Placeholder {
		t.Error("a revision changed a placeholder the sandbox holds")
	}
	if string(got[0].Value) != "value-b2" || got[0].Inject[0].Host != "c.test" || string(got[1].Value) != "value-a" {
		t.Errorf("revised values or hosts: %q %+v %q", got[0].Value, got[0].Inject, got[1].Value)
	}
	if err := s.Resolve(); err != nil {
		t.Fatal(err)
	}
	if string(s.Bound()[0].Value) != "value-b2" {
		t.Errorf("Resolve after the revision read %q", s.Bound()[0].Value)
	}
	undo()
	if got := s.Bound(); !reflect.DeepEqual(got, before) {
		t.Errorf("undo: %v, want %v", got, before)
	}
	// The placeholders stay known to a reopened set of the revised
	// definitions.
	if _, err := s.Revise(revised); err != nil {
		t.Fatal(err)
	}
	o, err := Open(dir, revised)
	if err != nil {
		t.Fatal(err)
	}
	if o.Bound()[0].Placeholder != before[1].Placeholder || string(o.Bound()[0].Value) != "value-b2" {
		t.Errorf("reopened: %v", o.Bound())
	}
}
