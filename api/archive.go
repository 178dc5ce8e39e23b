package api

import (
	"bufio"
	"compress/gzip"
	"io"
	"net/http"

	"github.com/gin-gonic/gin"
)

func (s *Server) upload(c *gin.Context) {
	var body io.Reader = c.Request.Body
	br := bufio.NewReader(body)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			fail(c, s.log, err)
			return
		}
		defer zr.Close()
		body = zr
	} else {
		body = br
	}
	res, err := s.cfg.Service.Upload(c.Request.Context(), caller(c), c.Param("id"), body)
	if err != nil {
		fail(c, s.log, err)
		return
	}
	c.JSON(http.StatusOK, res)
}

func (s *Server) download(c *gin.Context) {
	id := c.Param("id")
	w := &tarResponse{c: c, id: id}
	err := s.cfg.Service.Download(c.Request.Context(), caller(c), id, w)
	switch {
	case err != nil && !w.started:
		fail(c, s.log, err) // refused (scope, unknown id) before a byte: a clean error
	case err != nil:
		// Headers are out: the archive simply ends without tar's end marker, which
		// every tar reader reports as a truncated archive.
		s.log.Warn("archive download broke off", "session", id, "err", err)
	default:
		w.start()
	}
}

// tarResponse sends the archive's headers with its first bytes, so that a download
// refused before it starts is an ordinary error response.
type tarResponse struct {
	c       *gin.Context
	id      string
	started bool
}

func (w *tarResponse) start() {
	if w.started {
		return
	}
	w.started = true
	w.c.Header("Content-Type", "application/x-tar")
	w.c.Header("Content-Disposition", `attachment; filename="`+w.id+`.tar"`)
	w.c.Status(http.StatusOK)
	w.c.Writer.WriteHeaderNow()
}

func (w *tarResponse) Write(p []byte) (int, error) {
	w.start()
	return w.c.Writer.Write(p)
}

func (s *Server) diff(c *gin.Context) {
	d, err := s.cfg.Service.Diff(c.Request.Context(), caller(c), c.Param("id"))
	if err != nil {
		fail(c, s.log, err)
		return
	}
	c.Data(http.StatusOK, "text/x-diff; charset=utf-8", []byte(d))
}
