/* A small JSON reader for the fake NVML's scenario files: parse once, then look values up. */
#ifndef FAKE_NVML_JSON_H
#define FAKE_NVML_JSON_H

typedef enum { J_NULL, J_BOOL, J_NUMBER, J_STRING, J_ARRAY, J_OBJECT } json_type;

typedef struct json {
    json_type type;
    double number;          /* J_NUMBER, and J_BOOL as 0/1 */
    char *string;           /* J_STRING, UTF-8 */
    int count;              /* J_ARRAY and J_OBJECT: how many items */
    char **keys;            /* J_OBJECT */
    struct json **items;    /* J_ARRAY and J_OBJECT */
} json;

/* The document in `text`, or NULL with a one-line reason in `error` (size `error_size`). */
json *json_parse(const char *text, char *error, int error_size);
/* The member `key` of an object, or NULL (also when `object` is not one). */
const json *json_get(const json *object, const char *key);
/* The `index`th item of an array, or NULL. */
const json *json_at(const json *array, int index);

#endif
