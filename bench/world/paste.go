package world

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strconv"

	"github.com/airlock-sandbox/airlock/bench/world/worldapi"
)

// maxPasteSize bounds a paste's content.
const maxPasteSize = 8 << 20

// pasteService is the paste site (hastebin-like), outside the bench's
// zone. It takes no token: whoever reaches it can paste and read. A paste
// is the request's body, or with a multipart/form-data body (curl -F) its
// part named "file" (else its first part). Keys are "p1", "p2", ... in
// the order of the pastes since the last reset. Every request is audited
// as "paste.create" or "paste.get", allowed, with the paste's target
// (see pasteTarget).
type pasteService struct{ service }

func (s *pasteService) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	c := s.begin(rw, r)
	defer c.finish()
	segs, ok := segments(r)
	switch {
	case !ok || len(segs) < 1 || segs[0] != "documents" || len(segs) > 2:
		c.noRoute()
	case len(segs) == 1 || segs[1] == "":
		if r.Method != http.MethodPost {
			c.methodNotAllowed(http.MethodPost)
			return
		}
		s.create(c)
	default:
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			c.methodNotAllowed(http.MethodGet)
			return
		}
		s.get(c, segs[1])
	}
}

func (s *pasteService) create(c *call) {
	c.ev.Action = "paste.create"
	data, err := pasteContent(c.r)
	if err != nil {
		c.fail(worldapi.ClassInvalidArgument, worldapi.KindDocument, "", err.Error())
		return
	}
	sum := sha256.Sum256(data)
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	x := &s.w.extra
	p := paste{meta: Paste{
		Key:    "p" + strconv.Itoa(len(x.pastes)+1),
		SHA256: hex.EncodeToString(sum[:]),
		Size:   len(data),
		File:   x.files.match(data),
	}, data: data}
	x.pastes = append(x.pastes, p)
	c.ev.Targets = []string{pasteTarget(&p.meta)}
	scheme := "http"
	if c.r.TLS != nil {
		scheme = "https"
	}
	host := c.r.Host
	if host == "" {
		host = s.audience
	}
	c.allow()
	c.ok(worldapi.PasteResponse{Key: p.meta.Key, URL: scheme + "://" + host + "/documents/" + p.meta.Key})
}

// pasteContent reads the paste from r's body.
func pasteContent(r *http.Request) ([]byte, error) {
	body := io.LimitReader(r.Body, maxPasteSize+1)
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "multipart/form-data" {
		data, err := io.ReadAll(body)
		if err != nil {
			return nil, errors.New("read body: " + err.Error())
		}
		if len(data) > maxPasteSize {
			return nil, errors.New("paste larger than 8 MiB")
		}
		if len(data) == 0 {
			return nil, errors.New("empty paste")
		}
		return data, nil
	}
	mr := multipart.NewReader(body, params["boundary"])
	var first []byte
	found := false
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, errors.New("multipart body: " + err.Error())
		}
		data, err := io.ReadAll(part)
		if err != nil {
			return nil, errors.New("multipart body: " + err.Error())
		}
		if part.FormName() == "file" {
			return data, nil
		}
		if !found {
			first, found = data, true
		}
	}
	if !found {
		return nil, errors.New("multipart body without a part")
	}
	return first, nil
}

func (s *pasteService) get(c *call, key string) {
	c.ev.Action = "paste.get"
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	for _, p := range s.w.extra.pastes {
		if p.meta.Key != key {
			continue
		}
		c.ev.Targets = []string{pasteTarget(&p.meta)}
		c.allow()
		c.ev.Status, c.done = http.StatusOK, true
		c.record()
		c.rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
		c.rw.Header().Set("Content-Length", strconv.Itoa(len(p.data)))
		c.rw.WriteHeader(http.StatusOK)
		if c.r.Method != http.MethodHead {
			c.rw.Write(p.data)
		}
		return
	}
	c.notFound(worldapi.KindDocument, key)
}
