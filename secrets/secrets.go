// Package secrets holds the values of a session's manifest `secret`
// blocks on the daemon's side and gives the sandbox placeholders in their
// stead. It sits beside package credentials: credentials are minted for
// the sandbox and handed to it; secrets never enter it. The L7 gateway
// (package egress) replaces a placeholder by its value only on TLS to a
// host the secret is bound to, with a verified upstream certificate.
//
// For each policies.Secret of a session:
//   - the value is read by Resolve from its source, "env:VAR" (the
//     daemon's environment) or "file:/abs/path" (a regular file on the
//     daemon's host, opened without following a final symlink), at most
//     MaxValue bytes, not empty, one trailing newline trimmed from a file;
//   - a placeholder is made (NewPlaceholder), and delivered to the sandbox
//     as an environment variable of the container's spec, like the
//     manifest's env (a placeholder is not secret), and/or as a read-only
//     file at the secret's path;
//   - Bound pairs them for the gateway, with the hosts and headers the
//     value may go to.
//
// Placeholder format: PlaceholderPrefix ("airlock-secret-") followed by
// 40 lower-case hex digits, 160 bits from crypto/rand, made per secret per
// session. The fixed prefix lets the gateway find any placeholder in a
// request with one substring search (Placeholders); the random part makes
// a placeholder worthless outside its session, and unguessable.
//
// Restarts. The placeholders are kept in the session's state directory
// (StateFile, mode 0600), so a restarted daemon (Open) knows the ones a
// running sandbox holds. The values are never written anywhere: Open
// reads them again from their sources. A secret whose source is gone by
// then is unavailable (Bound.Value is nil), and the gateway refuses the
// requests that need it, until Resolve succeeds again.
//
// What it does not do: decide which sources a manifest may name (the
// admission policy does), check the values, or keep a program in the
// sandbox from sending its placeholder where the gateway does not look
// (an SNI-only host); a placeholder alone is worth nothing there.
package secrets

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/atomicfile"
	"github.com/airlock-sandbox/airlock/policies"
)

const (
	// PlaceholderPrefix starts every placeholder.
	PlaceholderPrefix = "airlock-secret-"
	// placeholderHex is the number of hex digits after the prefix.
	placeholderHex = 40
	// PlaceholderLen is the length of a placeholder.
	PlaceholderLen = len(PlaceholderPrefix) + placeholderHex
	// MaxValue bounds a secret's value.
	MaxValue = 64 << 10
	// StateFile holds a session's placeholders in its state directory.
	StateFile = "secrets.json"
	// FilesDir is the subdirectory of the state directory holding the
	// placeholder files bound into the sandbox.
	FilesDir = "secrets"
)

// NewPlaceholder returns a new random placeholder.
func NewPlaceholder() (string, error) {
	var b [placeholderHex / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return PlaceholderPrefix + hex.EncodeToString(b[:]), nil
}

// IsPlaceholder reports whether s is a placeholder in the format
// NewPlaceholder makes.
func IsPlaceholder(s string) bool {
	return len(s) == PlaceholderLen && strings.HasPrefix(s, PlaceholderPrefix) && isLowerHex(s[len(PlaceholderPrefix):])
}

// Placeholders returns the placeholders in b, of any session, in order
// (repeats included): where PlaceholderPrefix is followed by 40 lower-case
// hex digits.
func Placeholders(b []byte) []string {
	var out []string
	prefix := []byte(PlaceholderPrefix)
	for {
		i := bytes.Index(b, prefix)
		if i < 0 {
			return out
		}
		b = b[i:]
		if len(b) >= PlaceholderLen && isLowerHex(string(b[len(prefix):PlaceholderLen])) {
			out = append(out, string(b[:PlaceholderLen]))
			b = b[PlaceholderLen:]
			continue
		}
		b = b[len(prefix):]
	}
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Resolve reads a secret's value from its source (syntax as
// policies.ParseSecretSource): "env:VAR", the daemon's environment
// variable VAR, or "file:/abs/path", a regular file
// opened without following a final symlink, with one trailing newline
// ("\n" or "\r\n") trimmed. The value must not be empty or longer than
// MaxValue. Errors name the source and why, never the value: an unknown
// or malformed source is errdefs.ErrInvalidArgument, one that cannot be
// read errdefs.ErrFailedPrecondition.
func Resolve(from string) ([]byte, error) {
	kind, ref, reason := policies.ParseSecretSource(from)
	if reason != "" {
		return nil, fmt.Errorf("from %q: %s: %w", from, reason, errdefs.ErrInvalidArgument)
	}
	var v []byte
	switch kind {
	case "env":
		s, ok := os.LookupEnv(ref)
		if !ok {
			return nil, fmt.Errorf("from %q: the daemon's environment has no %s: %w", from, ref, errdefs.ErrFailedPrecondition)
		}
		v = []byte(s)
	case "file":
		var err error
		if v, err = readValueFile(ref); err != nil {
			return nil, fmt.Errorf("from %q: %w", from, err)
		}
		v = trimNewline(v)
	}
	switch {
	case len(v) == 0:
		return nil, fmt.Errorf("from %q: the value is empty: %w", from, errdefs.ErrFailedPrecondition)
	case len(v) > MaxValue:
		return nil, fmt.Errorf("from %q: the value is longer than %d bytes: %w", from, MaxValue, errdefs.ErrFailedPrecondition)
	}
	return v, nil
}

// readValueFile reads at most MaxValue+1 bytes of the regular file p,
// which admission resolved and checked: it is read again at every start
// and rotation, so the checks are made again on what is opened. No
// component of p may be a symbolic link (openat2 RESOLVE_NO_SYMLINKS;
// O_NOFOLLOW for the last one where openat2 is missing), so a link
// planted since admission cannot lead outside the admitted sources, and
// the file must have one name, so a hard link made since cannot either.
// O_NONBLOCK keeps a FIFO from blocking the open.
func readValueFile(p string) ([]byte, error) {
	f, err := openNoSymlinks(p)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.EXDEV) {
			return nil, fmt.Errorf("a symbolic link on the way: %w", errdefs.ErrFailedPrecondition)
		}
		return nil, fmt.Errorf("%w: %w", unwrapPath(err), errdefs.ErrFailedPrecondition)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", unwrapPath(err), errdefs.ErrFailedPrecondition)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%s): %w", st.Mode().Type(), errdefs.ErrFailedPrecondition)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Nlink > 1 {
		return nil, fmt.Errorf("the file has %d hard links (another of its names may be outside the admitted sources): %w", sys.Nlink, errdefs.ErrFailedPrecondition)
	}
	v, err := io.ReadAll(io.LimitReader(f, MaxValue+3)) // room for a trailing "\r\n"
	if err != nil {
		return nil, fmt.Errorf("%w: %w", unwrapPath(err), errdefs.ErrFailedPrecondition)
	}
	return v, nil
}

// openNoSymlinks opens p read-only, refusing a symbolic link anywhere in
// it.
func openNoSymlinks(p string) (*os.File, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	switch {
	case err == nil:
		return os.NewFile(uintptr(fd), p), nil
	case errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM):
		// No openat2 (kernels before 5.6, or a seccomp filter).
		return os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	}
	return nil, &os.PathError{Op: "open", Path: p, Err: err}
}

// unwrapPath drops the *os.PathError's path, which the caller's error
// already names.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func trimNewline(v []byte) []byte {
	if bytes.HasSuffix(v, []byte("\r\n")) {
		return v[:len(v)-2]
	}
	return bytes.TrimSuffix(v, []byte("\n"))
}

// Bound is one secret of a session as the gateway uses it: the
// placeholder the sandbox holds, the value that replaces it, and where
// the value may go. Value is nil while the secret is unavailable (its
// source could not be read after a restart): requests that need it must
// be refused. Bound never prints, logs or encodes its value (String,
// GoString, LogValue, MarshalJSON).
type Bound struct {
	Name        string
	Placeholder string
	Value       []byte
	Inject      []policies.SecretInject
}

// Available reports whether the value is known.
func (b Bound) Available() bool { return b.Value != nil }

// String names the secret and its placeholder, never the value.
func (b Bound) String() string {
	state := "available"
	if !b.Available() {
		state = "unavailable"
	}
	return fmt.Sprintf("secret %q (%s, %s)", b.Name, b.Placeholder, state)
}

// GoString is String, so that %#v does not print the value either.
func (b Bound) GoString() string { return b.String() }

// LogValue redacts the value.
func (b Bound) LogValue() slog.Value {
	return slog.GroupValue(slog.String("name", b.Name), slog.String("placeholder", b.Placeholder), slog.Bool("available", b.Available()))
}

// MarshalJSON leaves the value out.
func (b Bound) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Name        string                  `json:"name"`
		Placeholder string                  `json:"placeholder"`
		Available   bool                    `json:"available"`
		Inject      []policies.SecretInject `json:"inject,omitempty"`
	}{b.Name, b.Placeholder, b.Available(), b.Inject})
}

// Set is a session's secrets. It is safe for concurrent use; a nil Set
// is a session without secrets.
type Set struct {
	dir string

	mu sync.RWMutex
	// defs change only by Revise; Env, SpecOpts and the placeholder files
	// read the ones the sandbox was made with, before any revision.
	defs  []policies.Secret
	bound []Bound // +checklocks:mu
}

// state is StateFile's content.
type state struct {
	// Placeholders maps each secret's name to its placeholder.
	Placeholders map[string]string `json:"placeholders"`
}

// Prepare makes the secrets of a new session whose state directory is
// dir: it reads every value (an error names the secret that could not be
// read, and the session must be refused), makes the placeholders and
// keeps them in dir (StateFile), and writes the placeholder files that
// SpecOpts binds into the sandbox. Without secrets it returns nil.
func Prepare(dir string, defs []policies.Secret) (*Set, error) {
	if len(defs) == 0 {
		return nil, nil
	}
	if err := check(defs); err != nil {
		return nil, err
	}
	s := &Set{dir: dir, defs: defs, bound: make([]Bound, len(defs))}
	st := state{Placeholders: map[string]string{}}
	seen := map[string]bool{}
	for i, d := range defs {
		var v []byte
		if !fromCredential(d.From) {
			var err error
			if v, err = Resolve(d.From); err != nil {
				return nil, fmt.Errorf("secret %q: %w", d.Name, err)
			}
		}
		p, err := NewPlaceholder()
		if err != nil {
			return nil, err
		}
		if seen[p] {
			return nil, errors.New("secrets: placeholder collision")
		}
		seen[p] = true
		st.Placeholders[d.Name] = p
		s.bound[i] = Bound{Name: d.Name, Placeholder: p, Value: v, Inject: slices.Clone(d.Inject)}
	}
	b, err := json.Marshal(&st)
	if err != nil {
		return nil, err
	}
	if err := atomicfile.Write(dir, StateFile, b, 0o600, -1, -1); err != nil {
		return nil, fmt.Errorf("secrets: keep the placeholders: %w", err)
	}
	if err := s.writeFiles(); err != nil {
		return nil, err
	}
	return s, nil
}

// Open is the Set of a session prepared by an earlier daemon process in
// dir: the placeholders come from StateFile and the values are read
// again. A secret whose source cannot be read stays unavailable; the
// error says which and why, and the Set is returned all the same. A
// missing or damaged StateFile, or one without a placeholder for each
// secret, is an error with a nil Set. Without secrets it returns nil.
func Open(dir string, defs []policies.Secret) (*Set, error) {
	if len(defs) == 0 {
		return nil, nil
	}
	if err := check(defs); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(dir, StateFile))
	if err != nil {
		return nil, fmt.Errorf("secrets: the placeholders: %w", err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("secrets: %s: %w", StateFile, err)
	}
	s := &Set{dir: dir, defs: defs, bound: make([]Bound, len(defs))}
	for i, d := range defs {
		p := st.Placeholders[d.Name]
		if !IsPlaceholder(p) {
			return nil, fmt.Errorf("secrets: %s has no placeholder for secret %q: %w", StateFile, d.Name, errdefs.ErrFailedPrecondition)
		}
		s.bound[i] = Bound{Name: d.Name, Placeholder: p, Inject: slices.Clone(d.Inject)}
	}
	return s, s.Resolve()
}

// check refuses definitions the Set cannot keep apart or deliver: an
// empty or repeated name, a relative or root placeholder path.
func check(defs []policies.Secret) error {
	names := map[string]bool{}
	for _, d := range defs {
		if d.Name == "" {
			return fmt.Errorf("secret without a name: %w", errdefs.ErrInvalidArgument)
		}
		if names[d.Name] {
			return fmt.Errorf("secret %q declared twice: %w", d.Name, errdefs.ErrInvalidArgument)
		}
		names[d.Name] = true
		if d.Path != "" && (!path.IsAbs(d.Path) || path.Clean(d.Path) == "/") {
			return fmt.Errorf("secret %q: path %q must be an absolute file path: %w", d.Name, d.Path, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// Resolve reads every value again from its source. A secret that cannot
// be read becomes unavailable (its Value nil); the others get their
// current value. The error joins one per unavailable secret.
func (s *Set) Resolve() error {
	if s == nil {
		return nil
	}
	var errs []error
	s.mu.RLock()
	defs := s.defs
	values := make([][]byte, len(s.bound))
	for i := range s.bound {
		values[i] = s.bound[i].Value
	}
	s.mu.RUnlock()
	for i, d := range defs {
		if fromCredential(d.From) {
			continue // SetCredential keeps it
		}
		v, err := Resolve(d.From)
		if err != nil {
			errs = append(errs, fmt.Errorf("secret %q is unavailable: %w", d.Name, err))
			continue
		}
		values[i] = v
	}
	s.mu.Lock()
	// A revision meanwhile read its own values.
	if sameDefs(s.defs, defs) {
		for i, d := range s.defs {
			if !fromCredential(d.From) { // a token set meanwhile stays
				s.bound[i].Value = values[i]
			}
		}
	}
	s.mu.Unlock()
	return errors.Join(errs...)
}

// sameDefs reports whether a and b are the same slice of definitions.
func sameDefs(a, b []policies.Secret) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// fromCredential reports whether a secret's value is a credential's token
// ("credential:NAME"), which the daemon's credential plan hands over
// (SetCredential) as it mints and refreshes it.
func fromCredential(from string) bool { return strings.HasPrefix(from, "credential:") }

// SetCredential sets the value of every secret whose from is
// "credential:"+name: the credential's token, just minted or refreshed.
func (s *Set) SetCredential(name string, token []byte) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, d := range s.defs {
		if d.From == "credential:"+name {
			s.bound[i].Value = slices.Clone(token)
		}
	}
}

// Bound returns the session's secrets, in manifest order. The slice is
// the caller's; the values are shared and must not be changed.
func (s *Set) Bound() []Bound {
	if s == nil {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.bound)
}

// Env is the environment that delivers the placeholders: VAR=placeholder
// for each secret with an environment variable (env_var, or its name when
// the manifest gave neither env_var nor path).
func (s *Set) Env() []string {
	if s == nil {
		return nil
	}
	var env []string
	for i, d := range s.defs {
		if v := d.SandboxEnvVar(); v != "" {
			env = append(env, v+"="+s.bound[i].Placeholder)
		}
	}
	return env
}

// file is the placeholder file of secret i in the state directory.
func (s *Set) file(i int) string {
	return filepath.Join(s.dir, FilesDir, strconv.Itoa(i))
}

// writeFiles writes the placeholder file of each secret with a path
// (mode 0444: a placeholder is not secret).
func (s *Set) writeFiles() error {
	made := false
	for i, d := range s.defs {
		if d.Path == "" {
			continue
		}
		if !made {
			if err := os.Mkdir(filepath.Join(s.dir, FilesDir), 0o700); err != nil && !errors.Is(err, os.ErrExist) {
				return err
			}
			made = true
		}
		if err := atomicfile.Write(filepath.Join(s.dir, FilesDir), strconv.Itoa(i), []byte(s.bound[i].Placeholder), 0o444, -1, -1); err != nil {
			return fmt.Errorf("secret %q: placeholder file: %w", d.Name, err)
		}
	}
	return nil
}

// SpecOpts deliver the placeholders: Env in the process environment (as
// the manifest's env is; it must come after that), and each placeholder
// file bound read-only ("rbind", "ro", "nosuid", "nodev", "noexec") at its
// secret's path. A nil Set contributes none.
func (s *Set) SpecOpts() []oci.SpecOpts {
	if s == nil {
		return nil
	}
	opts := []oci.SpecOpts{oci.WithEnv(s.Env())}
	opts = append(opts, func(_ context.Context, _ oci.Client, _ *containers.Container, sp *oci.Spec) error {
		for i, d := range s.defs {
			if d.Path == "" {
				continue
			}
			sp.Mounts = append(sp.Mounts, specs.Mount{
				Destination: d.Path, Type: "bind", Source: s.file(i),
				Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"},
			})
		}
		return nil
	})
	return opts
}

// Revise replaces the Set's definitions with defs, a revision of the
// running ones (policies.Diff has refused what a running session cannot
// take): a secret left out is dropped, and the gateway no longer injects
// its value; a kept or changed one keeps its placeholder and takes its
// new hosts; a changed source is read again now (a credential's token
// comes with SetCredential, when the revision mints it). A secret defs
// adds, or one whose placeholder would be delivered elsewhere, is an
// error. It returns a function that puts the Set back as it was. On error
// nothing changes.
func (s *Set) Revise(defs []policies.Secret) (undo func(), err error) {
	if s == nil {
		if len(defs) > 0 {
			return nil, fmt.Errorf("secret %q: %s: %w", defs[0].Name, policies.ReasonSecretAdded, errdefs.ErrFailedPrecondition)
		}
		return func() {}, nil
	}
	if err := check(defs); err != nil {
		return nil, err
	}
	s.mu.RLock()
	prevDefs, prevBound := s.defs, slices.Clone(s.bound)
	s.mu.RUnlock()
	byName := map[string]int{}
	for i, d := range prevDefs {
		byName[d.Name] = i
	}
	bound := make([]Bound, len(defs))
	for i, d := range defs {
		j, ok := byName[d.Name]
		if !ok {
			return nil, fmt.Errorf("secret %q: %s: %w", d.Name, policies.ReasonSecretAdded, errdefs.ErrFailedPrecondition)
		}
		old := prevDefs[j]
		if old.EnvVar != d.EnvVar || old.Path != d.Path {
			return nil, fmt.Errorf("secret %q: %s: %w", d.Name, policies.ReasonSecretDelivery, errdefs.ErrFailedPrecondition)
		}
		b := prevBound[j]
		b.Inject = slices.Clone(d.Inject)
		if d.From != old.From {
			b.Value = nil
			if !fromCredential(d.From) {
				v, err := Resolve(d.From)
				if err != nil {
					return nil, fmt.Errorf("secret %q: %w", d.Name, err)
				}
				b.Value = v
			}
		}
		bound[i] = b
	}
	s.mu.Lock()
	s.defs, s.bound = slices.Clone(defs), bound
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.defs, s.bound = prevDefs, prevBound
		s.mu.Unlock()
	}, nil
}
