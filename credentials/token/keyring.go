package token

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/airlock-sandbox/airlock/credentials/clock"
	"github.com/airlock-sandbox/airlock/internal/atomicfile"
	"github.com/airlock-sandbox/airlock/internal/log"
)

// Keyring defaults.
const (
	// DefaultMaxTTL is the longest lifetime a token may have, and so how
	// long a retired key keeps verifying.
	DefaultMaxTTL = 12 * time.Hour
	// DefaultRotationPeriod is how long a key signs before it is retired.
	DefaultRotationPeriod = 24 * time.Hour
)

// ErrUnknownKey is returned for a key id that the keyring does not hold, or
// holds no longer.
var ErrUnknownKey = errors.New("unknown signing key")

// Keyring holds the Ed25519 keys that sign airlock tokens. The newest key
// signs; retired keys keep verifying until every token they signed has
// expired (retirement time + MaxTTL) and are then deleted.
//
// Keys live in a directory, one file per key named KID.json (mode 0600, a
// JWK with the private key and the key's dates); the directory is mode 0700.
// A key id is the key's RFC 7638 SHA-256 thumbprint, base64url encoded.
type Keyring struct {
	dir    string
	clock  clock.Clock
	maxTTL time.Duration

	mu sync.RWMutex
	// keys are sorted oldest first; the last one is the active key.
	// +checklocks:mu
	keys []*signingKey
}

type signingKey struct {
	kid     string
	priv    ed25519.PrivateKey
	created time.Time
	// retainUntil is zero while the key is active; once retired, the key
	// verifies until this time.
	retainUntil time.Time
}

// KeyInfo describes a key of the keyring, without its private part.
type KeyInfo struct {
	KID         string
	Created     time.Time
	RetainUntil time.Time // zero for the active key
}

// KeyringOption configures OpenKeyring.
type KeyringOption func(*Keyring)

// WithClock sets the keyring's clock (default clock.Real).
func WithClock(c clock.Clock) KeyringOption { return func(k *Keyring) { k.clock = c } }

// WithMaxTTL sets the longest token lifetime (default DefaultMaxTTL).
func WithMaxTTL(d time.Duration) KeyringOption { return func(k *Keyring) { k.maxTTL = d } }

// OpenKeyring loads the keys in dir, creating dir (0700) and a first key
// when there is none. It refuses key files that other users can read. Keys
// whose retention has passed are deleted.
func OpenKeyring(dir string, opts ...KeyringOption) (*Keyring, error) {
	k := &Keyring{dir: dir, clock: clock.Real, maxTTL: DefaultMaxTTL}
	for _, o := range opts {
		o(k)
	}
	if k.maxTTL <= 0 {
		return nil, fmt.Errorf("keyring %s: max TTL must be positive, got %s", dir, k.maxTTL)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("keyring: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, fmt.Errorf("keyring: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("keyring %s: not a directory", dir)
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return nil, fmt.Errorf("keyring: %w", err)
		}
	}
	keys, err := loadKeys(dir)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.keys = keys
	now := k.clock.Now()
	// A crash in the middle of Rotate can leave two active keys: keep the
	// newest one and retire the others.
	for i, key := range k.keys {
		if key.retainUntil.IsZero() && i != len(k.keys)-1 {
			key.retainUntil = now.Add(k.maxTTL)
			if err := writeKey(dir, key); err != nil {
				return nil, err
			}
		}
	}
	if err := k.pruneLocked(now); err != nil {
		return nil, err
	}
	if len(k.keys) == 0 || !k.keys[len(k.keys)-1].retainUntil.IsZero() {
		if err := k.addKeyLocked(now); err != nil {
			return nil, err
		}
	}
	return k, nil
}

func loadKeys(dir string) ([]*signingKey, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("keyring: %w", err)
	}
	var keys []*signingKey
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, atomicfile.TempPrefix) {
			// Left behind by an interrupted write.
			_ = os.Remove(filepath.Join(dir, name))
			continue
		}
		kid, ok := strings.CutSuffix(name, ".json")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		key, err := readKey(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		if key.kid != kid {
			return nil, fmt.Errorf("keyring: %s holds key %s", name, key.kid)
		}
		keys = append(keys, key)
	}
	slices.SortStableFunc(keys, func(a, b *signingKey) int {
		if c := a.created.Compare(b.created); c != 0 {
			return c
		}
		return strings.Compare(a.kid, b.kid)
	})
	return keys, nil
}

type keyFile struct {
	Created     time.Time       `json:"created"`
	RetainUntil time.Time       `json:"retain_until,omitzero"`
	Key         jose.JSONWebKey `json:"key"`
}

func readKey(path string) (*signingKey, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("keyring: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("keyring: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("keyring: key file %s has mode %#o, other users may have read it; remove it (tokens it signed stop verifying) or chmod 0600 if that is known to be safe", path, perm)
	}
	var kf keyFile
	dec := json.NewDecoder(f)
	if err := dec.Decode(&kf); err != nil {
		return nil, fmt.Errorf("keyring: key file %s: %w", path, err)
	}
	priv, ok := kf.Key.Key.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("keyring: key file %s: not an Ed25519 private key", path)
	}
	kid, err := thumbprint(priv.Public().(ed25519.PublicKey))
	if err != nil {
		return nil, fmt.Errorf("keyring: key file %s: %w", path, err)
	}
	return &signingKey{kid: kid, priv: priv, created: kf.Created, retainUntil: kf.RetainUntil}, nil
}

func writeKey(dir string, key *signingKey) error {
	b, err := json.Marshal(keyFile{
		Created:     key.created.UTC(),
		RetainUntil: key.retainUntil.UTC(),
		Key:         jose.JSONWebKey{Key: key.priv, KeyID: key.kid, Algorithm: string(jose.EdDSA), Use: "sig"},
	})
	if err != nil {
		return fmt.Errorf("keyring: encode key %s: %w", key.kid, err)
	}
	if err := atomicfile.Write(dir, key.kid+".json", b, 0o600, -1, -1); err != nil {
		return fmt.Errorf("keyring: %w", err)
	}
	return nil
}

func thumbprint(pub ed25519.PublicKey) (string, error) {
	jwk := jose.JSONWebKey{Key: pub}
	tp, err := jwk.Thumbprint(crypto.SHA256)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(tp), nil
}

// +checklocks:k.mu
func (k *Keyring) addKeyLocked(now time.Time) error {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return fmt.Errorf("keyring: generate key: %w", err)
	}
	kid, err := thumbprint(pub)
	if err != nil {
		return fmt.Errorf("keyring: %w", err)
	}
	// Keep creation times strictly increasing so that the newest key is
	// unambiguous after a reload, even when the clock stands still.
	if n := len(k.keys); n > 0 && !now.After(k.keys[n-1].created) {
		now = k.keys[n-1].created.Add(time.Nanosecond)
	}
	key := &signingKey{kid: kid, priv: priv, created: now}
	if err := writeKey(k.dir, key); err != nil {
		return err
	}
	k.keys = append(k.keys, key)
	return nil
}

// pruneLocked deletes retired keys whose retention has passed.
//
// +checklocks:k.mu
func (k *Keyring) pruneLocked(now time.Time) error {
	kept := k.keys[:0]
	var errs []error
	for _, key := range k.keys {
		if !key.retainUntil.IsZero() && !now.Before(key.retainUntil) {
			err := os.Remove(filepath.Join(k.dir, key.kid+".json"))
			if err == nil || errors.Is(err, fs.ErrNotExist) {
				continue
			}
			errs = append(errs, fmt.Errorf("keyring: %w", err))
		}
		kept = append(kept, key)
	}
	clear(k.keys[len(kept):])
	k.keys = kept
	return errors.Join(errs...)
}

// Dir returns the directory holding the keys.
func (k *Keyring) Dir() string { return k.dir }

// MaxTTL returns the longest token lifetime the keyring supports.
func (k *Keyring) MaxTTL() time.Duration { return k.maxTTL }

// Rotate retires the active key (it keeps verifying for MaxTTL), makes a new
// key active, and deletes keys whose retention has passed.
func (k *Keyring) Rotate() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.rotateLocked(k.clock.Now())
}

// +checklocks:k.mu
func (k *Keyring) rotateLocked(now time.Time) error {
	old := k.keys[len(k.keys)-1]
	// The new key is written before the old one is retired: a crash in
	// between leaves two active keys, which OpenKeyring resolves.
	if err := k.addKeyLocked(now); err != nil {
		return err
	}
	old.retainUntil = now.Add(k.maxTTL)
	if err := writeKey(k.dir, old); err != nil {
		return err
	}
	return k.pruneLocked(now)
}

// RotateIfDue rotates when the active key is period old or older, and prunes
// expired keys either way. It reports whether it rotated.
func (k *Keyring) RotateIfDue(period time.Duration) (bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.clock.Now()
	if now.Sub(k.keys[len(k.keys)-1].created) < period {
		return false, k.pruneLocked(now)
	}
	return true, k.rotateLocked(now)
}

// Run rotates the keys every period and deletes expired keys until ctx is
// done. Errors are logged and retried a minute later.
func (k *Keyring) Run(ctx context.Context, period time.Duration) {
	for {
		wait := time.Minute
		if _, err := k.RotateIfDue(period); err != nil {
			log.G(ctx).Error("key rotation failed", "dir", k.dir, "error", err)
		} else {
			wait = k.nextEvent(period)
		}
		select {
		case <-ctx.Done():
			return
		case <-k.clock.After(wait):
		}
	}
}

// nextEvent returns how long until the next rotation or key deletion, and
// at least a second.
func (k *Keyring) nextEvent(period time.Duration) time.Duration {
	k.mu.RLock()
	defer k.mu.RUnlock()
	now := k.clock.Now()
	next := k.keys[len(k.keys)-1].created.Add(period)
	for _, key := range k.keys {
		if !key.retainUntil.IsZero() && key.retainUntil.Before(next) {
			next = key.retainUntil
		}
	}
	return max(next.Sub(now), time.Second)
}

// active returns the signing key.
func (k *Keyring) active() *signingKey {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.keys[len(k.keys)-1]
}

// Keys describes the keys held, oldest first; the last one is active.
func (k *Keyring) Keys() []KeyInfo {
	k.mu.RLock()
	defer k.mu.RUnlock()
	out := make([]KeyInfo, len(k.keys))
	for i, key := range k.keys {
		out[i] = KeyInfo{KID: key.kid, Created: key.created, RetainUntil: key.retainUntil}
	}
	return out
}

// PublicKey returns the public key with the given id if it still verifies,
// or an error wrapping ErrUnknownKey.
func (k *Keyring) PublicKey(_ context.Context, kid string) (ed25519.PublicKey, error) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	now := k.clock.Now()
	for _, key := range k.keys {
		if key.kid == kid && k.verifiesLocked(key, now) {
			return key.priv.Public().(ed25519.PublicKey), nil
		}
	}
	return nil, fmt.Errorf("key id %q: %w", kid, ErrUnknownKey)
}

// +checklocks:k.mu
func (k *Keyring) verifiesLocked(key *signingKey, now time.Time) bool {
	return key.retainUntil.IsZero() || now.Before(key.retainUntil)
}

// JWKS returns the public keys that still verify, as a JSON Web Key Set.
func (k *Keyring) JWKS() jose.JSONWebKeySet {
	k.mu.RLock()
	defer k.mu.RUnlock()
	now := k.clock.Now()
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{}}
	for _, key := range k.keys {
		if !k.verifiesLocked(key, now) {
			continue
		}
		set.Keys = append(set.Keys, jose.JSONWebKey{
			Key:       key.priv.Public(),
			KeyID:     key.kid,
			Algorithm: string(jose.EdDSA),
			Use:       "sig",
		})
	}
	return set
}
