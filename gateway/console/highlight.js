// A small syntax highlighter for the source viewer: comments, strings, numbers, keywords and
// called names for the runtimes' languages. Output is HTML-escaped; unknown files stay plain.
(function () {
  "use strict";
  const KEYWORDS = {
    go: "break case chan const continue default defer else fallthrough for func go goto if import interface map package range return select struct switch type var nil true false",
    python: "and as assert async await break class continue def del elif else except finally for from global if import in is lambda None nonlocal not or pass raise return True False try while with yield",
    js: "async await break case catch class const continue default delete do else export extends false finally for function if import in instanceof let new null return super switch this throw true try typeof undefined var void while yield",
  };
  const COMMENT = { go: "//[^\\n]*|/\\*[\\s\\S]*?\\*/", js: "//[^\\n]*|/\\*[\\s\\S]*?\\*/", python: "#[^\\n]*" };
  const STRING = {
    go: "`[^`]*`|\"(?:\\\\.|[^\"\\\\\\n])*\"|'(?:\\\\.|[^'\\\\\\n])*'",
    js: "`(?:\\\\.|[^`\\\\])*`|\"(?:\\\\.|[^\"\\\\\\n])*\"|'(?:\\\\.|[^'\\\\\\n])*'",
    python: "\"\"\"[\\s\\S]*?\"\"\"|'''[\\s\\S]*?'''|\"(?:\\\\.|[^\"\\\\\\n])*\"|'(?:\\\\.|[^'\\\\\\n])*'",
  };
  const LANG_BY_EXT = { go: "go", py: "python", js: "js", mjs: "js", cjs: "js", ts: "js", json: "js" };

  function escape(s) {
    return s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  }

  function languageOf(name) {
    const ext = name.includes(".") ? name.split(".").pop().toLowerCase() : "";
    return LANG_BY_EXT[ext] || "";
  }

  // highlight returns HTML for the code of file name.
  function highlight(code, name) {
    const lang = languageOf(name);
    if (!lang) return escape(code);
    const words = new Set(KEYWORDS[lang].split(" "));
    const re = new RegExp("(" + COMMENT[lang] + ")|(" + STRING[lang] + ")|(\\b\\d[\\d_.xXa-fA-FeE]*\\b)|([A-Za-z_$][\\w$]*)", "g");
    let out = "", last = 0, m;
    while ((m = re.exec(code)) !== null) {
      out += escape(code.slice(last, m.index));
      const text = m[0];
      let cls = "";
      if (m[1]) cls = "tok-com";
      else if (m[2]) cls = "tok-str";
      else if (m[3]) cls = "tok-num";
      else if (words.has(text)) cls = "tok-kw";
      else if (m[4] && /^\s*\(/.test(code.slice(re.lastIndex))) cls = "tok-fn";
      out += cls ? '<span class="' + cls + '">' + escape(text) + "</span>" : escape(text);
      last = re.lastIndex;
    }
    return out + escape(code.slice(last));
  }

  window.slessHighlight = { highlight, escape, languageOf };
})();
