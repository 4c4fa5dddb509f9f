import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["**/dist/**", "**/node_modules/**", "coverage/**", ".tmp/**"] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      globals: {
        console: "readonly",
        process: "readonly",
        setTimeout: "readonly",
        clearTimeout: "readonly",
        setInterval: "readonly",
        clearInterval: "readonly",
        queueMicrotask: "readonly",
        URL: "readonly",
        TextEncoder: "readonly",
        TextDecoder: "readonly",
        Buffer: "readonly",
      },
    },
    rules: {
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
      "@typescript-eslint/consistent-type-imports": "error",
      "no-constant-condition": ["error", { checkLoops: false }],
    },
  },
  {
    // The operators' console: plain browser ES modules, with uPlot loaded before them.
    files: ["apps/gateway/console/**/*.js"],
    languageOptions: {
      sourceType: "module",
      globals: {
        document: "readonly",
        window: "readonly",
        location: "readonly",
        sessionStorage: "readonly",
        fetch: "readonly",
        WebSocket: "readonly",
        URLSearchParams: "readonly",
        Node: "readonly",
        crypto: "readonly",
        confirm: "readonly",
        ResizeObserver: "readonly",
        AbortSignal: "readonly",
        history: "readonly",
        uPlot: "readonly",
      },
    },
  },
  {
    // The demo page's script: a classic browser script, loaded at the end of its body.
    files: ["packages/widget/demo/**/*.js"],
    languageOptions: {
      sourceType: "script",
      globals: {
        document: "readonly",
        location: "readonly",
        navigator: "readonly",
        fetch: "readonly",
        crypto: "readonly",
        getSelection: "readonly",
      },
    },
  },
  {
    files: ["loadtest/k6/**/*.js"],
    languageOptions: { globals: { __ENV: "readonly", __VU: "readonly", __ITER: "readonly" } },
  },
);
