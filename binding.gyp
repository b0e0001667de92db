{
  "targets": [
    {
      "target_name": "nccl_node",
      "sources": [
        "<!@(node -p \"Object.values(require('./sources.json')).filter(Array.isArray).flat().join(' ')\")"
      ],
      "include_dirs": [
        "<!(node -p \"require('node-addon-api').include_dir\")"
      ],
      "defines": [
        "NAPI_VERSION=8",
        "NODE_ADDON_API_DISABLE_DEPRECATED",
        "NODE_ADDON_API_CPP_EXCEPTIONS",
        "NODE_API_NO_EXTERNAL_BUFFERS_ALLOWED"
      ],
      "cflags_cc!": ["-fno-exceptions", "-fno-rtti", "-std=gnu++17"],
      "cflags_cc": ["-std=c++17", "-fexceptions", "-frtti", "-Wall", "-Wextra", "-Wno-unused-parameter"],
      "libraries": ["-lgloo", "-ldl", "-lpthread"]
    }
  ]
}
