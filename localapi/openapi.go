package localapi

import (
	_ "embed"
	"net/http"
	"strconv"
)

// openAPIDoc is the OpenAPI 3 description of this API, kept in the
// repository next to the code and checked against the registered routes
// by TestOpenAPIMatchesRoutes.
//
//go:embed openapi.json
var openAPIDoc []byte

const openAPIPath = "/v1/openapi.json"

// GET /v1/openapi.json → 200 the OpenAPI document.
func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) {
	if _, err := query(r); err != nil {
		s.fail(w, r, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(openAPIDoc)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openAPIDoc)
}
