package gateway

import (
	"embed"
	"io/fs"
	"net/http"

	"github.com/labstack/echo/v4"
)

// consoleFiles is the web console: static files only, no CDN; it calls the /v1 API with the
// token the user signs in with.
//
//go:embed console
var consoleFiles embed.FS

// openapiSpec documents the /v1 API; served at /v1/openapi.yaml.
//
//go:embed openapi.yaml
var openapiSpec []byte

func (s *Server) consoleRoutes(e *echo.Echo) {
	sub, _ := fs.Sub(consoleFiles, "console")
	files := http.StripPrefix("/console/", http.FileServer(http.FS(sub)))
	e.GET("/console", func(c echo.Context) error { return c.Redirect(http.StatusFound, "/console/") })
	e.GET("/console/*", func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Referrer-Policy", "no-referrer")
		files.ServeHTTP(c.Response(), c.Request())
		return nil
	})
	e.GET("/", func(c echo.Context) error { return c.Redirect(http.StatusFound, "/console/") })
}
