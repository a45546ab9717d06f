// Package sessionca is a session's own certificate authority, with which
// the L7 gateway terminates the TLS connections it must read (hosts with
// HTTP rules or an injected secret): New makes it, Save and Load keep it
// in the session's state directory, Leaf mints (and caches) the server
// certificate the gateway presents for a name, and Trust makes the sandbox
// trust the CA (trust.go).
//
// The CA's key never leaves airlockd: it is in the daemon's memory and in
// ca-key.pem (0600) in the session's state directory, which no sandbox
// mounts. The sandbox gets the certificate only. The CA signs nothing
// but leaves for names a session connects to, and each session has its
// own: a CA taken from one sandbox is trusted by no other.
//
// Lifetimes. The CA is valid from an hour before it is made (clocks that
// differ a little between airlockd and the programs that check it) to 30
// days after: a session lives at most as long as the admission policy's
// maximum timeout (24 hours by default), and a sandbox may wait in a warm
// pool before a session takes it, so 30 days covers any session an
// operator would configure while bounding what a copied certificate is
// worth. A CA is never renewed: the certificate is mounted into a
// running sandbox, so a new one would not be trusted there. Leaves live
// at most LeafLifetime and are minted again when less than LeafRenew is
// left. All leaves of one CA share one key, made with the CA and never
// stored: a leaf's security is that of the CA's key beside it in the same
// process, and signing is then the only cost of a new name.
//
// What it does not do: revocation (a session's CA dies with the session's
// state directory), name constraints (the gateway asks only for names the
// session's policy allows), or certificates for anything but TLS servers.
package sessionca

import (
	"container/list"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/internal/atomicfile"
)

// File names in the directory of Save and Load.
const (
	// CertFile is the CA certificate (PEM), mode 0644: it is not secret.
	CertFile = "ca.pem"
	// KeyFile is the CA's private key (PKCS #8 PEM), mode 0600.
	KeyFile = "ca-key.pem"
)

// Lifetimes (see the package doc).
const (
	// CABackdate is how long before its creation a CA is valid.
	CABackdate = time.Hour
	// CALifetime is how long after its creation a CA is valid.
	CALifetime = 30 * 24 * time.Hour
	// LeafBackdate is how long before its minting a leaf is valid.
	LeafBackdate = 5 * time.Minute
	// LeafLifetime is how long after its minting a leaf is valid.
	LeafLifetime = 24*time.Hour - LeafBackdate
	// LeafRenew: a cached leaf with less than this left is minted again.
	LeafRenew = time.Hour
	// DefaultCacheSize bounds the leaves kept per CA; the least recently
	// used is dropped first.
	DefaultCacheSize = 1024
)

// CA is a session's certificate authority. It is safe for concurrent use.
type CA struct {
	session string
	cert    *x509.Certificate
	certPEM []byte
	key     *ecdsa.PrivateKey
	// leafKey signs no certificate: it is the key of every leaf.
	leafKey *ecdsa.PrivateKey
	pool    *x509.CertPool
	now     func() time.Time
	max     int

	mu sync.Mutex
	// leaves are the cached leaves by name, most recently used in front
	// of lru.
	leaves map[string]*list.Element // +checklocks:mu
	lru    *list.List               // +checklocks:mu
}

// cached is one entry of a CA's leaf cache.
type cached struct {
	name string
	cert *tls.Certificate
}

// New makes the CA of session: an ECDSA P-256 key and a self-signed
// certificate naming the session, valid from CABackdate ago for
// CALifetime.
func New(session string) (*CA, error) {
	return newCA(session, time.Now)
}

func newCA(session string, now func() time.Time) (*CA, error) {
	if session == "" {
		return nil, fmt.Errorf("session CA: no session id: %w", errdefs.ErrInvalidArgument)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	t := now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject: pkix.Name{
			CommonName:   "airlock session " + session,
			Organization: []string{"airlock"},
		},
		NotBefore:             t.Add(-CABackdate),
		NotAfter:              t.Add(CALifetime),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("session CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return build(session, cert, key, now)
}

// build completes a CA from its certificate and key.
func build(session string, cert *x509.Certificate, key *ecdsa.PrivateKey, now func() time.Time) (*CA, error) {
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{
		session: session,
		cert:    cert,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}),
		key:     key,
		leafKey: leafKey,
		pool:    pool,
		now:     now,
		max:     DefaultCacheSize,
		leaves:  map[string]*list.Element{},
		lru:     list.New(),
	}, nil
}

// Session is the id of the session the CA is for.
func (ca *CA) Session() string { return ca.session }

// Certificate is the CA's certificate.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// CertPEM is the CA's certificate, PEM-encoded: what the sandbox trusts.
func (ca *CA) CertPEM() []byte { return append([]byte(nil), ca.certPEM...) }

// Pool is a certificate pool holding the CA alone, for tests and
// clients that check the gateway's leaves as the sandbox does. The pool
// is shared: callers must not add to it.
func (ca *CA) Pool() *x509.CertPool { return ca.pool }

// Save writes the CA to dir as CertFile (0644) and KeyFile (0600), each
// replaced atomically (a temporary file renamed over it), so a daemon
// that dies while saving leaves either the old pair or the new one's
// files whole. The key is written first: a certificate is never on disk
// without its key.
func (ca *CA) Save(dir string) error {
	der, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	if err := atomicfile.Write(dir, KeyFile, keyPEM, 0o600, -1, -1); err != nil {
		return fmt.Errorf("session CA: save key: %w", err)
	}
	if err := atomicfile.Write(dir, CertFile, ca.certPEM, 0o644, -1, -1); err != nil {
		return fmt.Errorf("session CA: save certificate: %w", err)
	}
	return nil
}

// Load reads the CA Save wrote to dir. It refuses a key that is not the
// certificate's, a certificate that is not a CA, and one that has
// expired; errors are errdefs.ErrNotFound when either file is missing.
func Load(dir string) (*CA, error) {
	return load(dir, time.Now)
}

func load(dir string, now func() time.Time) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CertFile))
	if err != nil {
		return nil, loadErr(err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, KeyFile))
	if err != nil {
		return nil, loadErr(err)
	}
	cert, err := parseCert(certPEM)
	if err != nil {
		return nil, fmt.Errorf("session CA: %s: %w", CertFile, err)
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("session CA: %s: %w", KeyFile, err)
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(key.Public()) {
		return nil, fmt.Errorf("session CA: %s is not the key of %s: %w", KeyFile, CertFile, errdefs.ErrFailedPrecondition)
	}
	if !cert.IsCA || !cert.BasicConstraintsValid || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("session CA: %s is not a CA certificate: %w", CertFile, errdefs.ErrFailedPrecondition)
	}
	if t := now(); t.After(cert.NotAfter) {
		return nil, fmt.Errorf("session CA: expired at %s: %w", cert.NotAfter.UTC().Format(time.RFC3339), errdefs.ErrFailedPrecondition)
	}
	session, _ := strings.CutPrefix(cert.Subject.CommonName, "airlock session ")
	return build(session, cert, key, now)
}

func loadErr(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("session CA: %w: %w", err, errdefs.ErrNotFound)
	}
	return fmt.Errorf("session CA: %w", err)
}

func parseCert(b []byte) (*x509.Certificate, error) {
	blk, rest := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" || len(strings.TrimSpace(string(rest))) > 0 {
		return nil, fmt.Errorf("want exactly one PEM CERTIFICATE: %w", errdefs.ErrInvalidArgument)
	}
	return x509.ParseCertificate(blk.Bytes)
}

func parseKey(b []byte) (*ecdsa.PrivateKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("want a PEM PRIVATE KEY: %w", errdefs.ErrInvalidArgument)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, err
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok || ek.Curve != elliptic.P256() {
		return nil, fmt.Errorf("want an ECDSA P-256 key: %w", errdefs.ErrInvalidArgument)
	}
	return ek, nil
}

// Leaf returns the server certificate for name, a DNS name or an IP
// address, signed by the CA: ECDSA P-256, name as its only subject
// alternative name, for server authentication, valid from LeafBackdate ago
// for LeafLifetime (never beyond the CA). Leaves are cached per name
// (lower case, without a trailing dot), at most DefaultCacheSize of them,
// and minted again once less than LeafRenew is left. A name that is
// neither a hostname nor an IP address is an errdefs.ErrInvalidArgument
// error. The certificate is shared: callers must not change it.
func (ca *CA) Leaf(name string) (*tls.Certificate, error) {
	key, ip, err := normalize(name)
	if err != nil {
		return nil, err
	}
	now := ca.now()
	ca.mu.Lock()
	if el, ok := ca.leaves[key]; ok {
		if cert := el.Value.(*cached).cert; cert.Leaf.NotAfter.Sub(now) >= LeafRenew {
			ca.lru.MoveToFront(el)
			ca.mu.Unlock()
			return cert, nil
		}
	}
	ca.mu.Unlock()
	// Minted outside the lock: two callers may both mint a name, and the
	// later one's leaf is kept; either is valid.
	cert, err := ca.mint(key, ip, now)
	if err != nil {
		return nil, err
	}
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if el, ok := ca.leaves[key]; ok {
		el.Value.(*cached).cert = cert
		ca.lru.MoveToFront(el)
		return cert, nil
	}
	ca.leaves[key] = ca.lru.PushFront(&cached{name: key, cert: cert})
	for ca.lru.Len() > ca.max {
		old := ca.lru.Back()
		ca.lru.Remove(old)
		delete(ca.leaves, old.Value.(*cached).name)
	}
	return cert, nil
}

// mint signs a leaf for name (ip when name is an address).
func (ca *CA) mint(name string, ip netip.Addr, now time.Time) (*tls.Certificate, error) {
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-LeafBackdate),
		NotAfter:              now.Add(LeafLifetime),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	if tmpl.NotAfter.After(ca.cert.NotAfter) {
		tmpl.NotAfter = ca.cert.NotAfter
	}
	if ip.IsValid() {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip.AsSlice())
	} else {
		tmpl.DNSNames = []string{name}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, ca.leafKey.Public(), ca.key)
	if err != nil {
		return nil, fmt.Errorf("session CA: leaf for %q: %w", name, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: crypto.Signer(ca.leafKey), Leaf: leaf}, nil
}

// normalize returns name as a cache key and, for an IP address, the
// address. A hostname is lower-cased and loses a trailing dot; it must
// have labels of 1 to 63 letters, digits, '-' (not first or last) or '_',
// a last label that is not all digits, and be at most 253 bytes long.
// Wildcards are refused.
func normalize(name string) (string, netip.Addr, error) {
	// An address has a ':' or ends in a digit (no top-level domain is
	// numeric); only those are parsed, which keeps the cached path free of
	// allocations.
	if maybeAddr(name) {
		if ip, err := netip.ParseAddr(name); err == nil {
			if ip.Zone() != "" {
				return "", netip.Addr{}, fmt.Errorf("leaf name %q: an address with a zone: %w", name, errdefs.ErrInvalidArgument)
			}
			ip = ip.Unmap()
			return ip.String(), ip, nil
		}
	}
	n := strings.ToLower(strings.TrimSuffix(name, "."))
	if err := checkHostname(n); err != "" {
		return "", netip.Addr{}, fmt.Errorf("leaf name %q: %s: %w", name, err, errdefs.ErrInvalidArgument)
	}
	return n, netip.Addr{}, nil
}

func maybeAddr(name string) bool {
	if name == "" {
		return false
	}
	last := name[len(name)-1]
	return strings.IndexByte(name, ':') >= 0 || last >= '0' && last <= '9'
}

// checkHostname returns why n (lower case, no trailing dot) is not a
// hostname, or "".
func checkHostname(n string) string {
	if n == "" {
		return "empty"
	}
	if len(n) > 253 {
		return "longer than 253 bytes"
	}
	if tld := n[strings.LastIndexByte(n, '.')+1:]; strings.Trim(tld, "0123456789") == "" {
		return "the last label is numeric (an address is written without a trailing dot)"
	}
	for label := range strings.SplitSeq(n, ".") {
		if label == "" {
			return "empty label"
		}
		if len(label) > 63 {
			return "label longer than 63 bytes"
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return "label starts or ends with '-'"
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Sprintf("byte %q is not allowed in a hostname", c)
			}
		}
	}
	return ""
}

// serialNumber is a random 128-bit certificate serial number.
func serialNumber() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}
