// Wardgate status page, DOM helpers: building and filling nodes. Server data reaches the
// DOM only through these (textContent, attributes, dataset), never innerHTML.

export const $ = (selector, root = document) => root.querySelector(selector);

/**
 * Build an element. `props`: class, text, dataset (object), or any attribute; null,
 * undefined and false leave an attribute out. Children are nodes or strings (as text).
 */
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value == null || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = value;
    else if (key === 'dataset') {
      for (const [name, data] of Object.entries(value)) if (data != null) node.dataset[name] = data;
    } else node.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children.flat()) if (child != null && child !== false) node.append(child);
  return node;
}

/** Replace a node's children; null and false are skipped (replaceChildren would print them). */
export function fill(node, ...children) {
  node.replaceChildren(...children.flat().filter((child) => child != null && child !== false));
  return node;
}
