package gateway

import (
	"errors"
	"net/http"
	"slices"

	"github.com/labstack/echo/v4"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/rules"
)

// revisionsOf reads the revisions of the function the path names.
func (s *Server) revisionsOf(c echo.Context) (string, []api.Revision, error) {
	name, err := nameParam(c)
	if err != nil {
		return "", nil, err
	}
	revs, err := s.cfg.Backend.Revisions(c.Request().Context(), c.Param("ns"), name)
	return name, revs, err
}

// listRevisions answers GET .../functions/{name}/revisions.
func (s *Server) listRevisions(c echo.Context) error {
	_, revs, err := s.revisionsOf(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.RevisionList{Revisions: nonNil(revs)})
}

// getRevision answers GET .../functions/{name}/revisions/{rev}.
func (s *Server) getRevision(c echo.Context) error {
	name, revs, err := s.revisionsOf(c)
	if err != nil {
		return err
	}
	rev := c.Param("rev")
	i := slices.IndexFunc(revs, func(r api.Revision) bool { return r.Name == rev })
	if i < 0 {
		return &httpError{Code: http.StatusNotFound, Msg: "function " + name + " has no revision " + rev + "; list them at .../functions/" + name + "/revisions"}
	}
	return c.JSON(http.StatusOK, revs[i])
}

// rollback answers POST .../functions/{name}/rollback: all traffic to one revision in one
// update (tags stay where they are, with no share).
func (s *Server) rollback(c echo.Context) error {
	var req api.Rollback
	if c.Request().ContentLength != 0 { // no body: the default target
		if err := decodeBody(c, &req); err != nil {
			return err
		}
	}
	ctx, ns := c.Request().Context(), c.Param("ns")
	name, revs, err := s.revisionsOf(c)
	if err != nil {
		return err
	}
	to := req.To
	if to == "" {
		states := make([]rules.RevisionState, len(revs))
		var resolved []rules.ResolvedTarget
		for i, r := range revs {
			states[i] = rules.RevisionState{Name: r.Name, Number: r.Number, Phase: r.Status.Phase}
			if r.Percent > 0 {
				resolved = append(resolved, rules.ResolvedTarget{Revision: r.Name, Percent: r.Percent})
			}
		}
		var ok bool
		if to, ok = rules.RollbackTarget(states, resolved); !ok {
			return invalid("to", "function %s has no ready revision older than the one serving now; name one with \"to\"", name)
		}
	}
	fn, err := s.cfg.Backend.Functions().Update(ctx, ns, name, func(spec *api.FunctionSpec) error {
		traffic := []api.TrafficTarget{{Revision: to, Percent: 100}}
		for _, t := range spec.Traffic {
			if t.Tag != "" {
				t.Percent = 0
				traffic = append(traffic, t)
			}
		}
		return functionResource.apply(ns, name, spec, api.FunctionFields{Traffic: &traffic})
	})
	var iv *backend.InvalidError
	if errors.As(err, &iv) && iv.Field == "traffic[0].revision" {
		return &backend.InvalidError{Field: "to", Reason: iv.Reason}
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, fn)
}
