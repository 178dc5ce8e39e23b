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
	// Check first, so that an unknown id is a clean 404 rather than a broken stream.
	if _, err := s.cfg.Service.GetSession(c.Request.Context(), caller(c), id); err != nil {
		fail(c, s.log, err)
		return
	}
	c.Header("Content-Type", "application/x-tar")
	c.Header("Content-Disposition", `attachment; filename="`+id+`.tar"`)
	c.Status(http.StatusOK)
	if err := s.cfg.Service.Download(c.Request.Context(), caller(c), id, c.Writer); err != nil {
		// Headers are out: the archive simply ends without tar's end marker, which
		// every tar reader reports as a truncated archive.
		s.log.Warn("archive download broke off", "session", id, "err", err)
	}
}

func (s *Server) diff(c *gin.Context) {
	d, err := s.cfg.Service.Diff(c.Request.Context(), caller(c), c.Param("id"))
	if err != nil {
		fail(c, s.log, err)
		return
	}
	c.Data(http.StatusOK, "text/x-diff; charset=utf-8", []byte(d))
}
