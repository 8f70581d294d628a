package gateway

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"sless.dev/sless/gateway/api"
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

func (s *Server) listFunctions(c echo.Context) error {
	fns, err := s.cfg.Backend.ListFunctions(c.Request().Context(), c.Param("ns"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.FunctionList{Functions: nonNil(fns)})
}

func (s *Server) getFunction(c echo.Context) error {
	name, err := nameParam(c)
	if err != nil {
		return err
	}
	fn, err := s.cfg.Backend.GetFunction(c.Request().Context(), c.Param("ns"), name)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, fn)
}

func (s *Server) createFunction(c echo.Context) error {
	var req api.CreateFunction
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if err := validName("name", req.Name); err != nil {
		return err
	}
	if req.Runtime == nil {
		return invalid("runtime", "required; use one of %v", api.Runtimes)
	}
	spec := defaultFunctionSpec()
	applyFunctionFields(&spec, req.FunctionFields)
	if err := validateFunctionSpec(spec); err != nil {
		return err
	}
	fn, err := s.cfg.Backend.CreateFunction(c.Request().Context(), c.Param("ns"), req.Name, spec)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, fn)
}

func (s *Server) updateFunction(c echo.Context) error {
	name, err := nameParam(c)
	if err != nil {
		return err
	}
	var req api.FunctionFields
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	fn, err := s.cfg.Backend.UpdateFunction(c.Request().Context(), c.Param("ns"), name, func(spec *api.FunctionSpec) error {
		applyFunctionFields(spec, req)
		return validateFunctionSpec(*spec)
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, fn)
}

func (s *Server) deleteFunction(c echo.Context) error {
	name, err := nameParam(c)
	if err != nil {
		return err
	}
	if err := s.cfg.Backend.DeleteFunction(c.Request().Context(), c.Param("ns"), name); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) listTriggers(c echo.Context) error {
	ts, err := s.cfg.Backend.ListTriggers(c.Request().Context(), c.Param("ns"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.TriggerList{Triggers: nonNil(ts)})
}

func (s *Server) getTrigger(c echo.Context) error {
	name, err := nameParam(c)
	if err != nil {
		return err
	}
	t, err := s.cfg.Backend.GetTrigger(c.Request().Context(), c.Param("ns"), name)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, t)
}

func (s *Server) createTrigger(c echo.Context) error {
	var req api.CreateTrigger
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if err := validName("name", req.Name); err != nil {
		return err
	}
	if req.Type == nil {
		return invalid("type", "required; use http, cron or event")
	}
	spec := defaultTriggerSpec(*req.Type)
	if err := applyTriggerFields(&spec, req.TriggerFields); err != nil {
		return err
	}
	if err := validateTriggerSpec(spec); err != nil {
		return err
	}
	t, err := s.cfg.Backend.CreateTrigger(c.Request().Context(), c.Param("ns"), req.Name, spec)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, t)
}

// updateTrigger applies the sent fields; {"enabled": false} freezes the trigger in place.
func (s *Server) updateTrigger(c echo.Context) error {
	name, err := nameParam(c)
	if err != nil {
		return err
	}
	var req api.TriggerFields
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	t, err := s.cfg.Backend.UpdateTrigger(c.Request().Context(), c.Param("ns"), name, func(spec *api.TriggerSpec) error {
		if err := applyTriggerFields(spec, req); err != nil {
			return err
		}
		return validateTriggerSpec(*spec)
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, t)
}

func (s *Server) deleteTrigger(c echo.Context) error {
	name, err := nameParam(c)
	if err != nil {
		return err
	}
	if err := s.cfg.Backend.DeleteTrigger(c.Request().Context(), c.Param("ns"), name); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

func (s *Server) listJobs(c echo.Context) error {
	js, err := s.cfg.Backend.ListJobs(c.Request().Context(), c.Param("ns"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.JobList{Jobs: nonNil(js)})
}

func (s *Server) getJob(c echo.Context) error {
	name, err := nameParam(c)
	if err != nil {
		return err
	}
	j, err := s.cfg.Backend.GetJob(c.Request().Context(), c.Param("ns"), name)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, j)
}

func (s *Server) createJob(c echo.Context) error {
	var req api.CreateJob
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	if err := validName("name", req.Name); err != nil {
		return err
	}
	var spec api.JobSpec
	applyJobFields(&spec, req.JobFields)
	if err := validateJobSpec(spec); err != nil {
		return err
	}
	j, err := s.cfg.Backend.CreateJob(c.Request().Context(), c.Param("ns"), req.Name, spec)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, j)
}

// updateJob applies the sent fields; raising run_id runs the job again.
func (s *Server) updateJob(c echo.Context) error {
	name, err := nameParam(c)
	if err != nil {
		return err
	}
	var req api.JobFields
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	j, err := s.cfg.Backend.UpdateJob(c.Request().Context(), c.Param("ns"), name, func(spec *api.JobSpec) error {
		applyJobFields(spec, req)
		return validateJobSpec(*spec)
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, j)
}

func (s *Server) deleteJob(c echo.Context) error {
	name, err := nameParam(c)
	if err != nil {
		return err
	}
	if err := s.cfg.Backend.DeleteJob(c.Request().Context(), c.Param("ns"), name); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// nonNil makes empty lists encode as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
