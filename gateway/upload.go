package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"sless.dev/sless/buildkit"
	"sless.dev/sless/gateway/api"
	"sless.dev/sless/gateway/backend"
	"sless.dev/sless/gateway/codecheck"
)

// SourceStore keeps uploads and reads them back; buildkit.Artifacts implements it over S3 or
// a directory.
type SourceStore interface {
	SaveUpload(ctx context.Context, ns, name string, now time.Time, zipData []byte, bc *buildkit.BuildContext) (buildkit.Upload, error)
	OpenSource(ctx context.Context, zipKey string) (*buildkit.Archive, error)
}

// Caps of the source viewer's answer: files beyond them are listed without content.
const (
	maxViewedFile  = 256 << 10
	maxViewedTotal = 4 << 20
)

// uploadSource validates a zip for the object's runtime, optionally has it reviewed, stores
// it with its build context and points the object (a function, or a self-contained job) at
// it, which starts a build. code answers the runtime and entrypoint the zip is checked
// for, or why the object takes no upload; use sets the stored source on a spec.
func uploadSource[O, S any](s *Server, store func(backend.Backend) backend.Store[O, S], code func(name string, obj O) (runtime, entrypoint string, err error), use func(*S, *api.Source)) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx := c.Request().Context()
		ns := c.Param("ns")
		name, err := nameParam(c)
		if err != nil {
			return err
		}
		obj, err := store(s.cfg.Backend).Get(ctx, ns, name)
		if err != nil {
			return err
		}
		runtime, entrypoint, err := code(name, obj)
		if err != nil {
			return err
		}
		src, err := s.storeUpload(c, ns, name, runtime, entrypoint)
		if err != nil {
			return err
		}
		obj, err = store(s.cfg.Backend).Update(ctx, ns, name, func(spec *S) error {
			use(spec, src)
			return nil
		})
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, obj)
	}
}

func functionCode(_ string, fn api.Function) (string, string, error) {
	return fn.Runtime, fn.Entrypoint, nil
}

func useFunctionSource(spec *api.FunctionSpec, src *api.Source) { spec.Source = src }

// jobCode is a self-contained job's: its code is built like a function's, then the job
// runs. A job of a function takes no upload.
func jobCode(name string, j api.Job) (string, string, error) {
	if j.Function != "" {
		return "", "", &httpError{Code: http.StatusConflict, Field: "function",
			Msg: fmt.Sprintf("job %q runs function %q; upload code to that function instead", name, j.Function)}
	}
	return j.Runtime, j.Entrypoint, nil
}

func useJobSource(spec *api.JobSpec, src *api.Source) { spec.Source, spec.Image = src, "" }

// storeUpload reads the request's zip, validates it for runtime, optionally has it
// reviewed, and stores it with its build context under ns/name.
func (s *Server) storeUpload(c echo.Context, ns, name, runtime, entrypoint string) (*api.Source, error) {
	ctx := c.Request().Context()
	if s.cfg.Sources == nil {
		return nil, &httpError{Code: http.StatusServiceUnavailable, Msg: "uploads are not configured on this gateway (no artifact store)"}
	}
	data, err := buildkit.ReadUpload(c.Request().Body, s.cfg.Limits)
	if err != nil {
		return nil, err
	}
	src, err := buildkit.ValidateBytes(ctx, data, runtime, entrypoint, s.cfg.Limits)
	if err != nil {
		return nil, err
	}
	if err := s.checkCode(ctx, ns, name, src); err != nil {
		return nil, err
	}
	bc, err := buildkit.NewBuildContext(ctx, src)
	if err != nil {
		return nil, fmt.Errorf("build context of %s/%s: %w", ns, name, err)
	}
	up, err := s.cfg.Sources.SaveUpload(ctx, ns, name, time.Now(), data, bc)
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "source uploaded", "namespace", ns, "name", name, "hash", up.Hash, "bytes", len(data))
	return &api.Source{ContextKey: up.ContextKey, ArchiveKey: up.ZipKey, SHA256: up.Hash}, nil
}

// checkCode runs the optional code review: an unsafe verdict rejects the upload, a failing
// reviewer is logged and the upload proceeds.
func (s *Server) checkCode(ctx context.Context, ns, name string, src *buildkit.Source) error {
	if s.cfg.CodeCheck == nil {
		return nil
	}
	files, err := codecheck.Files(src)
	if err != nil {
		return err
	}
	v, err := s.cfg.CodeCheck.Check(ctx, files)
	if err != nil {
		s.log.WarnContext(ctx, "Warning: code check unavailable; upload proceeds unchecked", "namespace", ns, "function", name, "error", err)
		return nil
	}
	if !v.Safe {
		return &httpError{Code: http.StatusBadRequest, Field: "source", Msg: "the code check rejected the upload: " + v.Reason}
	}
	return nil
}

func (s *Server) getSource(c echo.Context) error {
	ctx := c.Request().Context()
	ns := c.Param("ns")
	name, err := nameParam(c)
	if err != nil {
		return err
	}
	if s.cfg.Sources == nil {
		return &httpError{Code: http.StatusServiceUnavailable, Msg: "sources are not available on this gateway (no artifact store)"}
	}
	fn, err := s.cfg.Backend.Functions().Get(ctx, ns, name)
	if err != nil {
		return err
	}
	if fn.Source == nil {
		return &httpError{Code: http.StatusNotFound, Msg: fmt.Sprintf("function %q has no uploaded source; upload a zip first", name)}
	}
	key := fn.Source.ArchiveKey
	if key == "" {
		if key, err = buildkit.ZipKeyForContext(fn.Source.ContextKey); err != nil {
			return err
		}
	}
	arch, err := s.cfg.Sources.OpenSource(ctx, key)
	if errors.Is(err, buildkit.ErrNotFound) {
		return &httpError{Code: http.StatusNotFound, Msg: fmt.Sprintf("the upload of function %q is gone from the artifact store; upload it again", name)}
	}
	if err != nil {
		return err
	}
	files, err := viewFiles(arch)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, api.SourceFiles{Function: name, Key: key, Files: files})
}

// viewFiles returns the archive's text files with content, others listed only.
func viewFiles(arch *buildkit.Archive) ([]api.SourceFile, error) {
	out := make([]api.SourceFile, 0, len(arch.Files))
	var total int64
	for _, f := range arch.Files {
		sf := api.SourceFile{Name: f.Name, Size: f.Size}
		switch {
		case f.Size > maxViewedFile:
			sf.Omitted = "too large to show"
		case total+f.Size > maxViewedTotal:
			sf.Omitted = "the source is too large to show in full"
		default:
			data, err := f.ReadAll(maxViewedFile)
			if err != nil {
				return nil, err
			}
			if utf8.Valid(data) {
				sf.Content = string(data)
				total += f.Size
			} else {
				sf.Omitted = "binary file"
			}
		}
		out = append(out, sf)
	}
	return out, nil
}

func (s *Server) listInvocations(c echo.Context) error {
	name, err := s.historyFunction(c)
	if err != nil {
		return err
	}
	q, err := invocationQuery(c.Param("ns"), name, c.QueryParam("limit"), c.QueryParam("before"))
	if err != nil {
		return err
	}
	page, err := s.cfg.History.List(c.Request().Context(), q)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, invocationsOf(page))
}
