package gateway

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v4"

	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/rules"
	"sless.dev/sless/triggers"
)

// The handlers decode and validate a request, call the Backend and answer with the wire
// model. Errors go to handleError.

func (s *Server) whoami(c echo.Context) error {
	id := identityOf(c)
	return c.JSON(http.StatusOK, api.Identity{Subject: id.Subject, Namespace: id.Namespace})
}

func (s *Server) ensureNamespace(c echo.Context) error {
	ns := c.Param("ns")
	if err := s.cfg.Backend.EnsureNamespace(c.Request().Context(), ns); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.Namespace{Name: ns})
}

// nameParam returns the :name path parameter, validated.
func nameParam(c echo.Context) (string, error) {
	name := c.Param("name")
	return name, validName("name", name)
}

// resource is one kind of the REST API, declared once; the handlers below serve every kind.
// O is the object, S its spec, C the create body and F the update body.
type resource[O, S, C, F any] struct {
	store func(backend.Backend) backend.Store[O, S]
	// wrap puts a listing into its wire form.
	wrap func([]O) any
	// name is a create body's object name.
	name func(C) string
	// base splits a create body into the spec it starts from (the kind's defaults) and the
	// fields then applied to that spec as an update's are.
	base func(C) (S, F, error)
	// apply changes the spec of object name in namespace ns by an update body and validates the result.
	apply func(ns, name string, spec *S, f F) error
	// inUse, when set, refuses a delete (a ConflictError naming what still uses the object).
	inUse func(ctx context.Context, b backend.Backend, ns, name string) error
	// show, when set, completes an object of an answer with what the API derives from it
	// (the same on both planes, so no Backend writes it).
	show func(*O)
}

var (
	functionResource = resource[api.Function, api.FunctionSpec, api.CreateFunction, api.FunctionFields]{
		store: backend.Backend.Functions,
		wrap:  func(fns []api.Function) any { return api.FunctionList{Functions: nonNil(fns)} },
		name:  func(req api.CreateFunction) string { return req.Name },
		base: func(req api.CreateFunction) (api.FunctionSpec, api.FunctionFields, error) {
			if req.Runtime == nil {
				return api.FunctionSpec{}, req.FunctionFields, invalid("runtime", "required; use one of %v", api.Runtimes)
			}
			return defaultFunctionSpec(), req.FunctionFields, nil
		},
		apply: func(ns, name string, spec *api.FunctionSpec, f api.FunctionFields) error {
			applyFunctionFields(spec, f)
			if err := validateFunctionSpec(*spec); err != nil {
				return err
			}
			if err := rules.CheckTraffic(name, spec.Traffic); err != nil {
				return invalid(err.Field, "%s", err.Reason)
			}
			if spec.Rollout != nil {
				if err := rules.CheckRollout(*spec.Rollout); err != nil {
					return invalid(err.Field, "%s", err.Reason)
				}
			}
			if err := validSecretRefs(*spec); err != nil {
				return err
			}
			return tenantQueues(ns, [][2]string{{"async.dead_letter_queue", spec.Async.DeadLetterQueue}})
		},
	}
	triggerResource = resource[api.Trigger, api.TriggerSpec, api.CreateTrigger, api.TriggerFields]{
		store: backend.Backend.Triggers,
		wrap:  func(ts []api.Trigger) any { return api.TriggerList{Triggers: nonNil(ts)} },
		name:  func(req api.CreateTrigger) string { return req.Name },
		base: func(req api.CreateTrigger) (api.TriggerSpec, api.TriggerFields, error) {
			if req.Type == nil {
				return api.TriggerSpec{}, req.TriggerFields, invalid("type", "required; use %s", triggers.Names())
			}
			return defaultTriggerSpec(*req.Type), req.TriggerFields, nil
		},
		// {"enabled": false} freezes a trigger in place.
		apply: func(ns, _ string, spec *api.TriggerSpec, f api.TriggerFields) error {
			if err := applyTriggerFields(spec, f); err != nil {
				return err
			}
			if err := validateTriggerSpec(*spec); err != nil {
				return err
			}
			return tenantQueues(ns, triggers.Queues(*spec))
		},
		show: func(t *api.Trigger) { t.Status.Source = triggers.Source(*t) },
	}
	jobResource = resource[api.Job, api.JobSpec, api.CreateJob, api.JobFields]{
		store: backend.Backend.Jobs,
		wrap:  func(js []api.Job) any { return api.JobList{Jobs: nonNil(js)} },
		name:  func(req api.CreateJob) string { return req.Name },
		base:  func(req api.CreateJob) (api.JobSpec, api.JobFields, error) { return api.JobSpec{}, req.JobFields, nil },
		// raising run_id runs the job again.
		apply: func(_, _ string, spec *api.JobSpec, f api.JobFields) error {
			applyJobFields(spec, f)
			return validateJobSpec(*spec)
		},
	}
)

// route registers the five handlers of r under path (e.g. "/functions"); update answers on
// updateMethod (PUT, or PATCH for triggers).
func route[O, S, C, F any](s *Server, g *echo.Group, path, updateMethod string, r resource[O, S, C, F]) {
	answer := func(c echo.Context, code int, obj O) error {
		if r.show != nil {
			r.show(&obj)
		}
		return c.JSON(code, obj)
	}
	g.GET(path, func(c echo.Context) error {
		list, err := r.store(s.cfg.Backend).List(c.Request().Context(), c.Param("ns"))
		if err != nil {
			return err
		}
		if r.show != nil {
			for i := range list {
				r.show(&list[i])
			}
		}
		return c.JSON(http.StatusOK, r.wrap(list))
	})
	g.GET(path+"/:name", func(c echo.Context) error {
		name, err := nameParam(c)
		if err != nil {
			return err
		}
		obj, err := r.store(s.cfg.Backend).Get(c.Request().Context(), c.Param("ns"), name)
		if err != nil {
			return err
		}
		return answer(c, http.StatusOK, obj)
	})
	g.POST(path, func(c echo.Context) error {
		var req C
		if err := decodeBody(c, &req); err != nil {
			return err
		}
		name := r.name(req)
		if err := validName("name", name); err != nil {
			return err
		}
		spec, fields, err := r.base(req)
		if err != nil {
			return err
		}
		if err := r.apply(c.Param("ns"), name, &spec, fields); err != nil {
			return err
		}
		obj, err := r.store(s.cfg.Backend).Create(c.Request().Context(), c.Param("ns"), name, spec)
		if err != nil {
			return err
		}
		return answer(c, http.StatusCreated, obj)
	})
	g.Add(updateMethod, path+"/:name", func(c echo.Context) error {
		name, err := nameParam(c)
		if err != nil {
			return err
		}
		var req F
		if err := decodeBody(c, &req); err != nil {
			return err
		}
		obj, err := r.store(s.cfg.Backend).Update(c.Request().Context(), c.Param("ns"), name, func(spec *S) error { return r.apply(c.Param("ns"), name, spec, req) })
		if err != nil {
			return err
		}
		return answer(c, http.StatusOK, obj)
	})
	g.DELETE(path+"/:name", func(c echo.Context) error {
		name, err := nameParam(c)
		if err != nil {
			return err
		}
		if r.inUse != nil {
			if err := r.inUse(c.Request().Context(), s.cfg.Backend, c.Param("ns"), name); err != nil {
				return err
			}
		}
		if err := r.store(s.cfg.Backend).Delete(c.Request().Context(), c.Param("ns"), name); err != nil {
			return err
		}
		return c.NoContent(http.StatusNoContent)
	})
}

// nonNil makes empty lists encode as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
