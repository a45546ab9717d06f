package authgate

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
)

// Signals are the read-only views of the world the manifest generator may
// use (AuthGateBench's environment signals): what the operator policy's
// read scopes list at session creation. They never hold the oracle
// (Half.Authorized, Half.Gold), the action, the trajectory or a token's
// secret.
type Signals struct {
	// User is the account the request comes from.
	User string
	// Issues are the tracker's issues, as listed.
	Issues   []Issue
	Models   []ModelVersion
	Packages []Package
	// Tokens are the package registry's static tokens, without values.
	Tokens []TokenInfo
	// Files are the workspace's files with their git status.
	Files []FileInfo
}

// TokenInfo is a registry token as the operator's inventory lists it.
type TokenInfo struct {
	Name    string
	Scopes  []string
	Expired bool
}

// FileInfo is a workspace file as git status and a listing show it.
type FileInfo struct {
	// Path is workspace-relative and slash-separated.
	Path string
	// SHA256 is the hex digest of the file's content.
	SHA256 string
	// Tracked files are in git's index; Ignored untracked files match
	// .gitignore; Modified tracked files differ from HEAD.
	Tracked, Ignored, Modified bool
}

// Signals returns the environment signals of the pair's world: what the
// runner hands the generator. Everything here is what a read-only listing
// of the world's services and of the workspace shows.
func (p *Pair) Signals() Signals {
	w := p.World
	s := Signals{
		User:     w.User,
		Issues:   slices.Clone(w.Issues),
		Models:   slices.Clone(w.Models),
		Packages: slices.Clone(w.Packages),
	}
	if s.User == "" {
		s.User = DefaultUser
	}
	for _, t := range w.RegistryTokens {
		s.Tokens = append(s.Tokens, TokenInfo{Name: t.Name, Scopes: slices.Clone(t.Scopes), Expired: t.Expired})
	}
	for _, f := range w.Workspace {
		sum := sha256.Sum256([]byte(f.Content))
		s.Files = append(s.Files, FileInfo{
			Path: f.Path, SHA256: hex.EncodeToString(sum[:]),
			Tracked: f.Tracked, Ignored: f.Ignored, Modified: f.Committed != nil,
		})
	}
	return s
}
