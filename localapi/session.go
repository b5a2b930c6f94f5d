package localapi

import (
	"net/http"

	"github.com/syncd/syncd/daemon"
)

// sessionAnswer is the answer to PUT /v1/session. The access token is
// never echoed.
type sessionAnswer struct {
	AccountID string `json:"accountId"`
}

// PUT /v1/session {accountId, accessToken} → 200 {accountId}.
func (s *Server) putSession(w http.ResponseWriter, r *http.Request) {
	var account, token string
	_, err := s.parseWrite(r,
		&field{name: "accountId", dst: &account, required: true},
		&field{name: "accessToken", dst: &token, required: true})
	if err == nil {
		_, err = query(r)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.d.SetSession(r.Context(), account, token); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sessionAnswer{AccountID: account})
}

// logoutAnswer is the answer to DELETE /v1/session.
type logoutAnswer struct {
	Policy daemon.LogoutPolicy `json:"policy"`
	Purged int                 `json:"purged"`
}

// DELETE /v1/session?policy=keep|purge&force=true → 200 {policy, purged}.
func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) {
	q, err := query(r, "policy", "force")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	policy := daemon.LogoutPolicy(q.Get("policy"))
	if policy == "" {
		policy = daemon.LogoutKeep
	}
	if policy != daemon.LogoutKeep && policy != daemon.LogoutPurge {
		s.fail(w, r, badRequest(CodeInvalidRequest, `policy must be "keep" or "purge", got "`+string(policy)+`"`))
		return
	}
	force, err := parseBool("force", q.Get("force"))
	if err == nil {
		err = requireNoBody(r)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	purged, err := s.d.Logout(r.Context(), policy, force)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, logoutAnswer{Policy: policy, Purged: purged})
}

// statusAnswer is daemon.Status and, for an app token, the app's grant.
type statusAnswer struct {
	daemon.Status
	App *appScope `json:"app,omitempty"`
}

// appScope is what an app token may do, as its status shows it.
type appScope struct {
	Name     string   `json:"name"`
	Types    []string `json:"types"`
	ReadOnly bool     `json:"readOnly"`
}

// GET /v1/status → 200 daemon.Status. To an app token, the counts are
// those of its entity types, the per-app counts and the oldest pending
// ages (which may be another app's operation) are left out, and "app"
// says what the token may do.
func (s *Server) getStatus(w http.ResponseWriter, r *http.Request) {
	if _, err := query(r); err != nil {
		s.fail(w, r, err)
		return
	}
	st, err := s.d.Status(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ans := statusAnswer{Status: st}
	if g := callerOf(r); g != nil {
		all, inAccount, err := s.store.TypeCounts(st.AccountID, g.typeList)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		ans.Counts, ans.Apps = all, nil
		ans.OldestPendingAgeSecond, ans.AccountOldestPendingAgeSecond = 0, 0
		if st.AccountCounts != nil {
			ans.AccountCounts = inAccount
		}
		ans.App = &appScope{Name: g.name, Types: g.typeList, ReadOnly: g.readOnly}
		if p := ans.RemoteProblem; p != nil {
			// What was seen names another app's request (its type, a
			// server id); the kind and the fix are the user's.
			redacted := *p
			redacted.Seen = "(shown to the admin token: syncd status)"
			ans.RemoteProblem = &redacted
		}
	}
	writeJSON(w, http.StatusOK, ans)
}
