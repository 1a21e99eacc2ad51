package locationd

import (
	"embed"
	"io/fs"
	"net/http"
)

// The dashboard (GET /): one page of hand-written HTML, CSS and JavaScript,
// embedded in the binary (no build step), that reads the API and follows
// the event stream. It calls the same routes as any client, so the same
// role checks apply: reading needs the read role, its relocate and drain
// buttons the operate role (docs/operating/monitoring.md, "Dashboard").
//
//go:embed dashboard/index.html dashboard/app.css dashboard/app.js
var dashboardFiles embed.FS

// dashboardCSP: the page loads its own script and style only, and talks
// to its own origin only.
const dashboardCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// dashboard serves the page at / and its files under /ui/.
func (s *Server) dashboard(mux *http.ServeMux) {
	sub, _ := fs.Sub(dashboardFiles, "dashboard")
	files := http.FileServerFS(sub)
	secure := func(h http.Handler) http.Handler {
		return s.getOnly(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hd := w.Header()
			hd.Set("Content-Security-Policy", dashboardCSP)
			hd.Set("X-Content-Type-Options", "nosniff")
			hd.Set("Cache-Control", "no-cache")
			h.ServeHTTP(w, r)
		}))
	}
	page := secure(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, sub, "index.html")
	}))
	mux.Handle("/{$}", s.m.instrument("/", page))
	for _, f := range []string{"/ui/app.js", "/ui/app.css"} {
		mux.Handle(f, s.m.instrument("/ui/", secure(http.StripPrefix("/ui", files))))
	}
}
